//! GRPO groups of both agent roles in one run: a [`GroupSampler`] that interleaves groups drawn
//! from a Repair [`AgentSampler`] and a Test one — every `test_every`-th group drawn is a Test
//! group (eq. 5 with the in-group length penalty), the others Repair groups (eq. 6). Advantages
//! are centred within each group, so the two reward scales never mix in one baseline; DAPO's
//! dynamic sampling keeps or skips each group by its own reward variance.

use super::grpo::{AgentSampler, Role, RolloutLog};
use crate::engine::Engine;
use crate::train::dynamic::Scored;
use crate::train::error::Result;
use crate::train::rollout::{GroupSampler, Rollout};

/// Repair groups with a Test group every `test_every` draws (no Test sampler or `test_every`
/// 0: Repair only).
pub struct RoleMix {
    repair: AgentSampler,
    test: Option<AgentSampler>,
    test_every: usize,
    draws: usize,
}

impl RoleMix {
    pub fn new(repair: AgentSampler, test: Option<AgentSampler>, test_every: usize) -> Self {
        RoleMix { repair, test, test_every, draws: 0 }
    }

    /// The role of the next group drawn.
    pub fn next_role(&self) -> Role {
        let every = self.test_every;
        if self.test.is_some() && every > 0 && self.draws % every == every - 1 {
            Role::Test
        } else {
            Role::Repair
        }
    }

    /// The rollouts of both roles logged since the previous call (each log names its role).
    pub fn take_drawn(&mut self) -> Vec<RolloutLog> {
        let mut drawn = self.repair.take_drawn();
        if let Some(t) = self.test.as_mut() {
            drawn.extend(t.take_drawn());
        }
        drawn
    }
}

impl GroupSampler for RoleMix {
    fn needs_chat_template(&self) -> bool {
        true
    }

    /// Both samplers start the iteration's streams; the role sequence starts at draw
    /// `iteration · groups`, as an uninterrupted run without skipped groups would.
    fn begin_iteration(&mut self, iteration: u64, groups: usize) {
        self.repair.begin_iteration(iteration, groups);
        if let Some(t) = self.test.as_mut() {
            t.begin_iteration(iteration, groups);
        }
        self.draws = (iteration as usize).wrapping_mul(groups);
    }

    fn sample_group(&mut self, engine: &Engine, attempt: usize, size: usize) -> Result<Vec<Scored<Vec<Rollout>>>> {
        let role = self.next_role();
        self.draws += 1;
        match (role, self.test.as_mut()) {
            (Role::Test, Some(test)) => test.sample_group(engine, attempt, size),
            _ => self.repair.sample_group(engine, attempt, size),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::grpo::AgentTaskConfig;
    use crate::task::easy_suite;

    fn sampler(role: Role) -> AgentSampler {
        let cfg = AgentTaskConfig { tasks: Some(easy_suite().unwrap()), ..AgentTaskConfig::default() };
        AgentSampler::new(role, cfg, std::path::Path::new("unused-model"), 1, None).unwrap()
    }

    /// The roles of the next `n` draws.
    fn roles(mix: &mut RoleMix, n: usize) -> Vec<Role> {
        (0..n)
            .map(|_| {
                let r = mix.next_role();
                mix.draws += 1;
                r
            })
            .collect()
    }

    #[test]
    fn every_nth_group_is_a_test_group() {
        use Role::{Repair as R, Test as T};
        let mut mix = RoleMix::new(sampler(R), Some(sampler(T)), 3);
        assert_eq!(roles(&mut mix, 7), [R, R, T, R, R, T, R]);
        let mut all_test = RoleMix::new(sampler(R), Some(sampler(T)), 1);
        assert_eq!(roles(&mut all_test, 2), [T, T]);
        // No Test sampler, or `test_every` 0: Repair only.
        assert_eq!(roles(&mut RoleMix::new(sampler(R), None, 3), 4), [R; 4]);
        assert_eq!(roles(&mut RoleMix::new(sampler(R), Some(sampler(T)), 0), 4), [R; 4]);
    }

    /// Iteration `i` of a run wanting `g` groups starts the role sequence at draw `i · g`,
    /// whatever was drawn before (a resumed run draws the roles of the uninterrupted one).
    #[test]
    fn an_iteration_starts_the_roles_at_its_first_draw() {
        use Role::{Repair as R, Test as T};
        let mut mix = RoleMix::new(sampler(R), Some(sampler(T)), 3);
        roles(&mut mix, 5);
        mix.begin_iteration(1, 2);
        assert_eq!(roles(&mut mix, 4), [T, R, R, T], "draws 2..6");
        mix.begin_iteration(0, 2);
        assert_eq!(roles(&mut mix, 3), [R, R, T]);
    }
}
