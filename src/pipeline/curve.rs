//! A small SVG line-chart writer for training curves (reward and resolve rate per iteration):
//! one panel per chart, shared x axis of iterations, series as polylines with point markers,
//! a legend, and y-axis ticks. No dependencies; the output is plain SVG 1.1.

use std::fmt::Write;

/// One series: a label, a colour and (x, y) points (x = iteration).
#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub color: &'static str,
    pub points: Vec<(f64, f64)>,
}

/// One panel: a title, the y range and its series.
#[derive(Clone, Debug)]
pub struct Panel {
    pub title: String,
    pub y_min: f64,
    pub y_max: f64,
    pub series: Vec<Series>,
}

const W: f64 = 640.0;
const PANEL_H: f64 = 240.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 34.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Render `panels` stacked vertically over a shared x range `0..=x_max`.
pub fn render(panels: &[Panel], x_max: f64) -> String {
    let height = PANEL_H * panels.len() as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{height}" fill="white"/>"#);
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    let plot_w = W - LEFT - RIGHT;
    let plot_h = PANEL_H - TOP - BOTTOM;
    for (k, p) in panels.iter().enumerate() {
        let y0 = PANEL_H * k as f64 + TOP;
        let span = if p.y_max > p.y_min { p.y_max - p.y_min } else { 1.0 };
        let px = |x: f64| LEFT + plot_w * x / x_max;
        let py = |y: f64| y0 + plot_h * (1.0 - (y.clamp(p.y_min, p.y_min + span) - p.y_min) / span);
        let _ = writeln!(s, r#"<text x="{LEFT}" y="{}" font-size="13" font-weight="bold">{}</text>"#, y0 - 10.0, escape(&p.title));
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#888"/>"##
        );
        for t in 0..=4 {
            let v = p.y_min + span * t as f64 / 4.0;
            let y = py(v);
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{v:.2}</text>"##,
                LEFT + plot_w,
                LEFT - 4.0,
                y + 4.0
            );
        }
        let ticks = (x_max as usize).clamp(1, 10);
        for t in 0..=ticks {
            let x = x_max * t as f64 / ticks as f64;
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{x:.0}</text>"#,
                px(x),
                y0 + plot_h + 14.0
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">iteration</text>"#,
            LEFT + plot_w / 2.0,
            y0 + plot_h + 28.0
        );
        for (j, series) in p.series.iter().enumerate() {
            let pts: Vec<String> = series.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
            let c = series.color;
            if pts.len() > 1 {
                let _ = writeln!(s, r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#, pts.join(" "));
            }
            for &(x, y) in &series.points {
                let _ = writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#, px(x), py(y));
            }
            let ly = y0 + 12.0 + 16.0 * j as f64;
            let lx = LEFT + plot_w + 10.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
                lx + 16.0,
                lx + 20.0,
                ly + 4.0,
                escape(&series.label)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_series_and_point_inside_the_plot() {
        let panel = Panel {
            title: "mean reward <eq. 6>".into(),
            y_min: 0.0,
            y_max: 1.5,
            series: vec![
                Series { label: "train".into(), color: "#1f77b4", points: vec![(0.0, 0.2), (1.0, 0.7), (2.0, 1.5)] },
                Series { label: "held-back".into(), color: "#d62728", points: vec![(0.0, 0.1)] },
            ],
        };
        let svg = render(&[panel.clone(), panel], 2.0);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2, "one-point series have no line");
        assert_eq!(svg.matches("<circle").count(), 8);
        assert!(svg.contains("mean reward &lt;eq. 6&gt;"));
        // The maximum lands on the plot's top edge, the minimum x on its left edge.
        assert!(svg.contains(&format!("cx=\"{:.1}\" cy=\"{:.1}\"", LEFT + W - LEFT - RIGHT, TOP)));
        assert!(svg.contains(&format!("cx=\"{LEFT:.1}\"")));
    }
}
