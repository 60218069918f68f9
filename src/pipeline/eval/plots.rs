//! The report's figures as self-contained SVG (no fonts or system libraries needed: text is left
//! to the viewer's default sans-serif): resolved rate by condition (Round 0 and final, mean with
//! ± std whiskers), the revision-turn histogram, and the per-instance outcome grid.

use super::records::ResultRow;
use super::report::Report;

const ROUND0: &str = "#9ecae1";
const FINAL: &str = "#3182bd";
const UNRESOLVED: &str = "#eeeeee";
const INFRA: &str = "#e6550d";
const REPAIRED: &str = "#31a354";

/// A small SVG document builder.
struct Svg {
    w: f64,
    h: f64,
    body: String,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

impl Svg {
    fn new(w: f64, h: f64, title: &str) -> Svg {
        let mut s = Svg { w, h, body: String::new() };
        s.rect(0.0, 0.0, w, h, "#ffffff");
        s.text(w / 2.0, 22.0, title, 15.0, "middle");
        s
    }
    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str) {
        self.body += &format!("<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{fill}\"/>\n");
    }
    fn titled_rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, tip: &str) {
        self.body += &format!(
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{fill}\" stroke=\"#ffffff\"><title>{}</title></rect>\n",
            esc(tip)
        );
    }
    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str) {
        self.body += &format!("<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"{stroke}\" stroke-width=\"1\"/>\n");
    }
    fn text(&mut self, x: f64, y: f64, t: &str, size: f64, anchor: &str) {
        self.body += &format!(
            "<text x=\"{x:.1}\" y=\"{y:.1}\" font-family=\"sans-serif\" font-size=\"{size}\" text-anchor=\"{anchor}\">{}</text>\n",
            esc(t)
        );
    }
    fn legend(&mut self, x: f64, y: f64, items: &[(&str, &str)]) {
        for (i, (color, label)) in items.iter().enumerate() {
            let yy = y + i as f64 * 16.0;
            self.rect(x, yy - 10.0, 12.0, 12.0, color);
            self.text(x + 18.0, yy, label, 11.0, "start");
        }
    }
    /// A vertical axis from 0 to `max` over the plot area `[top, bottom]` at `x`.
    fn y_axis(&mut self, x: f64, top: f64, bottom: f64, max: f64, ticks: usize, right: f64) {
        for k in 0..=ticks {
            let v = max * k as f64 / ticks as f64;
            let y = bottom - (bottom - top) * k as f64 / ticks as f64;
            self.line(x, y, right, y, "#dddddd");
            self.text(x - 6.0, y + 4.0, &format!("{v:.0}"), 10.0, "end");
        }
        self.line(x, top, x, bottom, "#333333");
        self.line(x, bottom, right, bottom, "#333333");
    }
    fn finish(self) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">\n{}</svg>\n",
            self.body,
            w = self.w,
            h = self.h
        )
    }
}

/// Resolved % by condition: Round 0 and final bars, whiskers at mean ± std.
pub fn resolved_svg(report: &Report) -> String {
    let n = report.conditions.len().max(1) as f64;
    let (left, top, bottom) = (60.0, 45.0, 260.0);
    let group = 110.0;
    let w = left + n * group + 150.0;
    let mut s = Svg::new(w, 300.0, &format!("Resolved % by condition ({} instances, {} runs)", report.instances, report.runs));
    s.y_axis(left, top, bottom, 100.0, 5, left + n * group + 10.0);
    let y_of = |v: f64| bottom - (bottom - top) * v.clamp(0.0, 100.0) / 100.0;
    for (i, c) in report.conditions.iter().enumerate() {
        let x0 = left + 15.0 + i as f64 * group;
        for (j, (rate, color)) in [(&c.round0, ROUND0), (&c.final_, FINAL)].into_iter().enumerate() {
            let x = x0 + j as f64 * 40.0;
            s.titled_rect(x, y_of(rate.mean), 36.0, bottom - y_of(rate.mean), color, &format!("{}: {:.1} ± {:.1}", c.condition, rate.mean, rate.std));
            let (lo, hi) = (y_of(rate.mean - rate.std), y_of(rate.mean + rate.std));
            s.line(x + 18.0, lo, x + 18.0, hi, "#000000");
            s.text(x + 18.0, y_of(rate.mean) - 4.0, &format!("{:.1}", rate.mean), 10.0, "middle");
        }
        s.text(x0 + 38.0, bottom + 16.0, &c.condition, 11.0, "middle");
    }
    s.legend(left + n * group + 25.0, top + 10.0, &[(ROUND0, "Round 0"), (FINAL, "final")]);
    s.finish()
}

/// Histogram of the turns added by revision (bins of 5 turns), per condition that entered repair.
pub fn revision_turns_svg(report: &Report) -> String {
    let conds: Vec<_> = report.conditions.iter().filter(|c| c.revision_turns.trajectories > 0).collect();
    let max_turns = conds.iter().flat_map(|c| c.revision_turns.values.iter().copied()).max().unwrap_or(0);
    let bins = max_turns / 5 + 1;
    let counts: Vec<Vec<usize>> = conds
        .iter()
        .map(|c| {
            let mut v = vec![0; bins];
            for &t in &c.revision_turns.values {
                v[t / 5] += 1;
            }
            v
        })
        .collect();
    let ymax = counts.iter().flatten().copied().max().unwrap_or(0).max(1) as f64;
    let (left, top, bottom) = (60.0, 45.0, 260.0);
    let bw = 60.0;
    let w = left + bins as f64 * bw + 170.0;
    let mut s = Svg::new(w, 300.0, "Turns added by revision (trajectories that entered repair)");
    let ticks = (ymax as usize).min(5);
    s.y_axis(left, top, bottom, ymax, ticks.max(1), left + bins as f64 * bw + 10.0);
    let colors = [FINAL, REPAIRED, INFRA, ROUND0, "#756bb1", "#636363"];
    let per = conds.len().max(1) as f64;
    for (ci, v) in counts.iter().enumerate() {
        for (b, &k) in v.iter().enumerate() {
            let x = left + 5.0 + b as f64 * bw + ci as f64 * (bw - 10.0) / per;
            let h = (bottom - top) * k as f64 / ymax;
            s.titled_rect(x, bottom - h, (bw - 10.0) / per, h, colors[ci % colors.len()], &format!("{}: {k} trajectories", conds[ci].condition));
        }
    }
    for b in 0..bins {
        s.text(left + 5.0 + b as f64 * bw + (bw - 10.0) / 2.0, bottom + 16.0, &format!("{}–{}", b * 5, b * 5 + 4), 10.0, "middle");
    }
    let items: Vec<(&str, &str)> = conds.iter().enumerate().map(|(i, c)| (colors[i % colors.len()], c.condition.as_str())).collect();
    s.legend(left + bins as f64 * bw + 25.0, top + 10.0, &items);
    s.finish()
}

/// One cell per instance × condition × run: resolved at Round 0, resolved by revision,
/// unresolved, or an infrastructure failure.
pub fn outcomes_svg(results: &[ResultRow]) -> String {
    let mut ids: Vec<&str> = Vec::new();
    let mut cols: Vec<(&str, usize)> = Vec::new();
    for r in results {
        if !ids.contains(&r.instance_id.as_str()) {
            ids.push(&r.instance_id);
        }
        if !cols.contains(&(r.condition.as_str(), r.run)) {
            cols.push((&r.condition, r.run));
        }
    }
    let label_w = 12.0 + 7.0 * ids.iter().map(|s| s.len()).max().unwrap_or(0) as f64;
    let (cell, top) = (22.0, 110.0);
    let w = label_w + cols.len() as f64 * cell + 190.0;
    let h = top + ids.len() as f64 * cell + 20.0;
    let mut s = Svg::new(w, h.max(180.0), "Outcome per instance, condition and run");
    for (j, (c, run)) in cols.iter().enumerate() {
        let x = label_w + j as f64 * cell + cell / 2.0;
        s.body += &format!(
            "<text x=\"{x:.1}\" y=\"{:.1}\" font-family=\"sans-serif\" font-size=\"10\" transform=\"rotate(-60 {x:.1} {:.1})\">{} r{run}</text>\n",
            top - 6.0,
            top - 6.0,
            esc(c)
        );
    }
    for (i, id) in ids.iter().enumerate() {
        let y = top + i as f64 * cell;
        s.text(label_w - 6.0, y + 15.0, id, 11.0, "end");
        for (j, (c, run)) in cols.iter().enumerate() {
            let Some(r) = results.iter().find(|r| r.instance_id == *id && r.condition == *c && r.run == *run) else {
                continue;
            };
            let (color, what) = match (&r.infra_error, r.round0_resolved, r.final_resolved) {
                (Some(_), _, _) => (INFRA, "infrastructure failure"),
                (None, true, true) => (ROUND0, "resolved at Round 0"),
                (None, false, true) => (REPAIRED, "resolved by revision"),
                (None, _, false) => (UNRESOLVED, "unresolved"),
            };
            s.titled_rect(label_w + j as f64 * cell, y, cell, cell, color, &format!("{id} {c} run {run}: {what}"));
        }
    }
    s.legend(
        label_w + cols.len() as f64 * cell + 20.0,
        top + 10.0,
        &[(ROUND0, "resolved at Round 0"), (REPAIRED, "resolved by revision"), (UNRESOLVED, "unresolved"), (INFRA, "infrastructure failure")],
    );
    s.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_documents_are_closed() {
        let svg = Svg::new(10.0, 10.0, "a<b & \"c\"").finish();
        assert!(svg.contains("a&lt;b &amp; &quot;c&quot;"));
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
    }
}
