//! A simulation's plan: the steps one seed decides, all before any runs (so a seed is the
//! same plan whatever happened), written as text (`prompt(0,1,tools) kill(1) …`) that
//! `talaria-sim --plan` replays, and read back.

use std::fmt;

/// How many agent processes may run at once on the home.
pub const SLOTS: u8 = 2;

/// What the scripted model does in a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnKind {
    /// A streamed answer.
    Text,
    /// Tool calls that write and read a file, then an answer.
    Tools,
    /// An HTTP 500 first (the call is tried again), then an answer.
    ProviderError,
    /// The stream cut before any text (tried again), then an answer.
    Dropped,
}

/// One step of a simulation. `slot` names an agent process (started there when none runs);
/// `session` an index into the sessions made so far (modulo their number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    NewSession {
        slot: u8,
    },
    Prompt {
        slot: u8,
        session: u8,
        turn: TurnKind,
    },
    Steer {
        slot: u8,
        session: u8,
    },
    Cancel {
        slot: u8,
        session: u8,
    },
    Fork {
        slot: u8,
        session: u8,
    },
    Close {
        slot: u8,
        session: u8,
    },
    Delete {
        slot: u8,
        session: u8,
    },
    Rewind {
        slot: u8,
        session: u8,
        files: bool,
    },
    Compact {
        slot: u8,
        session: u8,
    },
    /// End of input for the slot's process (a clean stop).
    Stop {
        slot: u8,
    },
    /// SIGKILL of the slot's process now.
    Kill {
        slot: u8,
    },
    /// The slot's process is replaced (the old one stopped) by one that dies at the `nth`
    /// pass of failpoint `point`.
    CrashAt {
        slot: u8,
        point: &'static str,
        nth: u8,
    },
    /// The slot's process is replaced by one whose `point` fails `times` times, from its
    /// `nth` pass on, as a full disk or a refusing store would.
    Refuse {
        slot: u8,
        point: &'static str,
        nth: u8,
        times: u8,
    },
    /// Another program takes SQLite's write lock and holds it through the next `steps`
    /// steps (`0`: gives it back now).
    HoldStore {
        steps: u8,
    },
}

/// A seeded random source (SplitMix64: small, and the same numbers on every machine).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }

    fn small(&mut self, bound: u64) -> u8 {
        u8::try_from(self.below(bound)).unwrap_or(0)
    }
}

/// The plan seed `seed` decides: `steps` steps, weighted toward turns, crashing and faulting
/// at the known failpoints.
pub fn plan(seed: u64, steps: usize) -> Vec<Step> {
    let points = super::known_points::known_points();
    let mut rng = Rng::new(seed);
    let mut plan = vec![Step::NewSession { slot: 0 }];
    while plan.len() < steps {
        plan.push(one_step(&mut rng, &points));
    }
    plan
}

fn one_step(rng: &mut Rng, points: &[&'static str]) -> Step {
    let slot = rng.small(u64::from(SLOTS));
    let session = rng.small(8);
    match rng.below(100) {
        0..=11 => Step::NewSession { slot },
        12..=39 => Step::Prompt {
            slot,
            session,
            turn: match rng.below(6) {
                0 | 1 => TurnKind::Text,
                2 | 3 => TurnKind::Tools,
                4 => TurnKind::ProviderError,
                _ => TurnKind::Dropped,
            },
        },
        40..=44 => Step::Steer { slot, session },
        45..=48 => Step::Cancel { slot, session },
        49..=54 => Step::Fork { slot, session },
        55..=60 => Step::Close { slot, session },
        61..=62 => Step::Delete { slot, session },
        63..=68 => Step::Rewind {
            slot,
            session,
            files: rng.below(2) == 0,
        },
        69..=71 => Step::Compact { slot, session },
        72..=75 => Step::Stop { slot },
        76..=81 => Step::Kill { slot },
        82..=89 => Step::CrashAt {
            slot,
            point: pick(rng, points),
            nth: 1 + rng.small(6),
        },
        90..=93 => Step::Refuse {
            slot,
            point: pick(rng, points),
            nth: 1 + rng.small(4),
            times: 1 + rng.small(5),
        },
        _ => Step::HoldStore {
            steps: rng.small(5),
        },
    }
}

/// One of `points`, chosen by `rng`.
fn pick(rng: &mut Rng, points: &[&'static str]) -> &'static str {
    let at = usize::try_from(rng.below(points.len() as u64)).unwrap_or(0);
    points.get(at).copied().unwrap_or("journal::commit::before")
}

impl fmt::Display for TurnKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TurnKind::Text => "text",
            TurnKind::Tools => "tools",
            TurnKind::ProviderError => "error",
            TurnKind::Dropped => "dropped",
        })
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Step::NewSession { slot } => write!(f, "new({slot})"),
            Step::Prompt {
                slot,
                session,
                turn,
            } => write!(f, "prompt({slot},{session},{turn})"),
            Step::Steer { slot, session } => write!(f, "steer({slot},{session})"),
            Step::Cancel { slot, session } => write!(f, "cancel({slot},{session})"),
            Step::Fork { slot, session } => write!(f, "fork({slot},{session})"),
            Step::Close { slot, session } => write!(f, "close({slot},{session})"),
            Step::Delete { slot, session } => write!(f, "delete({slot},{session})"),
            Step::Rewind {
                slot,
                session,
                files,
            } => write!(f, "rewind({slot},{session},{})", u8::from(files)),
            Step::Compact { slot, session } => write!(f, "compact({slot},{session})"),
            Step::Stop { slot } => write!(f, "stop({slot})"),
            Step::Kill { slot } => write!(f, "kill({slot})"),
            Step::CrashAt { slot, point, nth } => write!(f, "crash({slot},{point},{nth})"),
            Step::Refuse {
                slot,
                point,
                nth,
                times,
            } => write!(f, "refuse({slot},{point},{nth},{times})"),
            Step::HoldStore { steps } => write!(f, "hold({steps})"),
        }
    }
}

/// A plan as text: its steps separated by spaces.
pub fn to_text(plan: &[Step]) -> String {
    plan.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why a plan's text does not read.
#[derive(Debug, thiserror::Error)]
#[error("not a step: {0:?}")]
pub struct BadStep(String);

/// Reads a plan written by [`to_text`].
pub fn from_text(text: &str) -> Result<Vec<Step>, BadStep> {
    text.split_whitespace().map(read_step).collect()
}

fn read_step(word: &str) -> Result<Step, BadStep> {
    let bad = || BadStep(word.to_string());
    let (name, rest) = word.split_once('(').ok_or_else(bad)?;
    let args: Vec<&str> = rest.strip_suffix(')').ok_or_else(bad)?.split(',').collect();
    let n = |i: usize| -> Result<u16, BadStep> {
        args.get(i).and_then(|a| a.parse().ok()).ok_or_else(bad)
    };
    let b = |i: usize| -> Result<u8, BadStep> { u8::try_from(n(i)?).map_err(|_| bad()) };
    let known = |i: usize| -> Result<&'static str, BadStep> {
        let name = args.get(i).ok_or_else(bad)?;
        super::known_points::known_points()
            .into_iter()
            .find(|p| p == name)
            .ok_or_else(bad)
    };
    let (slot, session) = (b(0), b(1));
    Ok(match name {
        "new" => Step::NewSession { slot: slot? },
        "prompt" => Step::Prompt {
            slot: slot?,
            session: session?,
            turn: match args.get(2).copied() {
                Some("text") => TurnKind::Text,
                Some("tools") => TurnKind::Tools,
                Some("error") => TurnKind::ProviderError,
                Some("dropped") => TurnKind::Dropped,
                _ => return Err(bad()),
            },
        },
        "steer" => Step::Steer {
            slot: slot?,
            session: session?,
        },
        "cancel" => Step::Cancel {
            slot: slot?,
            session: session?,
        },
        "fork" => Step::Fork {
            slot: slot?,
            session: session?,
        },
        "close" => Step::Close {
            slot: slot?,
            session: session?,
        },
        "delete" => Step::Delete {
            slot: slot?,
            session: session?,
        },
        "rewind" => Step::Rewind {
            slot: slot?,
            session: session?,
            files: b(2)? == 1,
        },
        "compact" => Step::Compact {
            slot: slot?,
            session: session?,
        },
        "stop" => Step::Stop { slot: slot? },
        "kill" => Step::Kill { slot: slot? },
        "crash" => Step::CrashAt {
            slot: slot?,
            point: known(1)?,
            nth: b(2)?,
        },
        "refuse" => Step::Refuse {
            slot: slot?,
            point: known(1)?,
            nth: b(2)?,
            times: b(3)?,
        },
        "hold" => Step::HoldStore { steps: b(0)? },
        _ => return Err(bad()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_is_one_plan_and_its_text_reads_back_as_it() {
        for seed in 0..200 {
            let planned = plan(seed, 30);
            assert_eq!(planned, plan(seed, 30), "seed {seed}");
            let text = to_text(&planned);
            assert_eq!(from_text(&text).expect("reads"), planned, "{text}");
        }
        assert_ne!(plan(1, 30), plan(2, 30));
        assert!(from_text("prompt(0,1,sideways)").is_err());
    }
}
