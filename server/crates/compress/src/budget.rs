//! When to compact and how much room each part gets: the threshold (a share of the window),
//! the protected tail (a share of the threshold), the head, and the summary's size.

/// The knobs of compaction (`[compression]` in config.toml).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Compact automatically before a model call that would exceed the threshold.
    pub enabled: bool,
    /// Threshold as a share of windows below `large_window`.
    pub threshold: f64,
    /// Threshold as a share of windows of `large_window` tokens and more.
    pub large_threshold: f64,
    pub large_window: u64,
    /// The protected tail, as a share of the threshold.
    pub tail_ratio: f64,
    /// Non-system entries kept at the start before the first compaction.
    pub head_entries: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold: 0.75,
            large_threshold: 0.5,
            large_window: 512_000,
            tail_ratio: 0.2,
            head_entries: 3,
        }
    }
}

/// The token budget of one compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub window: u64,
    /// Requests above this are compacted.
    pub threshold: u64,
    /// The tail walk stops at this many tokens.
    pub tail: u64,
    /// The largest summary asked for.
    pub summary_max: u64,
}

impl Budget {
    pub fn new(window: u64, settings: &Settings) -> Self {
        let share = if window >= settings.large_window {
            settings.large_threshold
        } else {
            settings.threshold
        };
        let threshold = ((window as f64) * share.clamp(0.05, 1.0)) as u64;
        let tail = ((threshold as f64) * settings.tail_ratio.clamp(0.01, 0.9)) as u64;
        let summary_max = (window / 20).clamp(256, 10_000);
        Self {
            window,
            threshold,
            tail,
            summary_max,
        }
    }

    /// The summary size to ask for when summarising `middle` tokens: a fifth of them, within
    /// bounds.
    pub fn summary_target(&self, middle: u64) -> u64 {
        (middle / 5).clamp(self.summary_max.min(512), self.summary_max)
    }

    /// Whether a request of `tokens` needs compaction.
    pub fn exceeded_by(&self, tokens: u64) -> bool {
        tokens > self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_follow_the_window_size() {
        let settings = Settings::default();
        let small = Budget::new(128_000, &settings);
        assert_eq!(small.threshold, 96_000);
        assert_eq!(small.tail, 19_200);
        assert_eq!(small.summary_max, 6_400);
        let large = Budget::new(1_000_000, &settings);
        assert_eq!(large.threshold, 500_000);
        assert_eq!(large.summary_max, 10_000);
        let tiny = Budget::new(8_000, &settings);
        assert_eq!(tiny.threshold, 6_000);
        assert_eq!(tiny.summary_max, 400);
        assert_eq!(tiny.summary_target(100_000), 400);
        assert_eq!(tiny.summary_target(100), 400);
        assert!(tiny.exceeded_by(6_001) && !tiny.exceeded_by(6_000));
    }
}
