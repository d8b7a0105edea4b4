//! The survey's areas and stages, each named once: the survey runs its stages, its verdict
//! has a row per area, the command line gates on a stage and the report groups series by area.
//!
//! | stage           | area     | series            |
//! |-----------------|----------|-------------------|
//! | `wakeup-idle`   | `wakeup` | `wakeup-idle/...` |
//! | `wakeup-loaded` | `wakeup` | `wakeup-loaded/...` |
//! | `lock`, `invert`, `mmap`, `slack`, `ipc`, `net`, `noise` | the same | `<stage>/...` |
//! | (none: the check runs before the stages) | `check` | `check/<id>` |

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! named {
    ($(#[$meta:meta])* $ty:ident { $($(#[$vmeta:meta])* $variant:ident = $name:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $ty {
            $($(#[$vmeta])* $variant,)*
        }

        impl $ty {
            /// Every value, in order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant,)*];

            /// Its name, in series names and in the JSON.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)*
                }
            }
        }

        impl std::str::FromStr for $ty {
            type Err = UnknownName;

            fn from_str(text: &str) -> Result<$ty, UnknownName> {
                $ty::ALL
                    .iter()
                    .copied()
                    .find(|v| v.name() == text)
                    .ok_or_else(|| UnknownName {
                        name: text.to_string(),
                        expected: $ty::ALL.iter().map(|v| v.name()).collect(),
                    })
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

named! {
    /// An area of the survey, in the order its verdict reads them.
    Area {
        /// Wakeup latency of a periodic real-time thread, idle and under load.
        Wakeup = "wakeup",
        /// Lock and hand-off costs of mutexes.
        Lock = "lock",
        /// Priority inversion and the protocols against it.
        Invert = "invert",
        /// Oversleep under timer slack.
        Slack = "slack",
        /// Round trips between processes.
        Ipc = "ipc",
        /// Round trips over the network stack.
        Net = "net",
        /// What a busy-polling thread keeps of its CPU.
        Noise = "noise",
        /// Page faults and memory mapping.
        Mmap = "mmap",
        /// The machine's settings.
        Check = "check",
    }
}

named! {
    /// A stage of the survey, in the order it runs them: its series are `<stage>/...`.
    SurveyStage {
        /// Wakeups on an idle machine.
        WakeupIdle = "wakeup-idle",
        /// Wakeups under load.
        WakeupLoaded = "wakeup-loaded",
        /// A short lock stage.
        Lock = "lock",
        /// A short inversion stage.
        Invert = "invert",
        /// A short mmap stage.
        Mmap = "mmap",
        /// A short slack stage.
        Slack = "slack",
        /// A short ipc stage.
        Ipc = "ipc",
        /// A short net stage.
        Net = "net",
        /// A short noise stage.
        Noise = "noise",
    }
}

/// A name that is none of a type's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown area '{name}' (expected one of {})", expected.join(", "))]
pub struct UnknownName {
    /// The name given.
    pub name: String,
    /// The names there are.
    pub expected: Vec<&'static str>,
}

impl SurveyStage {
    /// The area it measures.
    pub fn area(self) -> Area {
        match self {
            SurveyStage::WakeupIdle | SurveyStage::WakeupLoaded => Area::Wakeup,
            SurveyStage::Lock => Area::Lock,
            SurveyStage::Invert => Area::Invert,
            SurveyStage::Mmap => Area::Mmap,
            SurveyStage::Slack => Area::Slack,
            SurveyStage::Ipc => Area::Ipc,
            SurveyStage::Net => Area::Net,
            SurveyStage::Noise => Area::Noise,
        }
    }

    /// `<stage>/`, the start of its series' names.
    pub fn prefix(self) -> String {
        format!("{}/", self.name())
    }
}

impl Serialize for Area {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Area {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Area, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// Where series `name` of a document of `command` belongs: the area of its survey stage or
/// area (`wakeup-idle/thread0`, `ipc/...`, `check/...`), else the area the command measures
/// (`net run`), else none (`watch`).
pub fn area_of(command: &str, name: &str) -> Option<Area> {
    if let Some((first, _)) = name.split_once('/') {
        if let Ok(stage) = first.parse::<SurveyStage>() {
            return Some(stage.area());
        }
        if let Ok(area) = first.parse::<Area>() {
            return Some(area);
        }
    }
    command_word(command).parse().ok()
}

/// The command's first word (`net` of `net run`).
pub fn command_word(command: &str) -> &str {
    command.split_whitespace().next().unwrap_or(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_parsing_and_json() {
        for &area in Area::ALL {
            assert_eq!(area.name().parse::<Area>(), Ok(area));
            let json = serde_json::to_value(area).unwrap();
            assert_eq!(json, serde_json::json!(area.name()));
            assert_eq!(serde_json::from_value::<Area>(json).unwrap(), area);
        }
        for &stage in SurveyStage::ALL {
            assert_eq!(stage.name().parse::<SurveyStage>(), Ok(stage));
        }
        let err = "wakeup".parse::<SurveyStage>().unwrap_err();
        assert!(err.to_string().starts_with(
            "unknown area 'wakeup' (expected one of wakeup-idle, wakeup-loaded, lock"
        ));
        assert!(serde_json::from_value::<Area>(serde_json::json!("elsewhere")).is_err());
    }

    #[test]
    fn every_area_but_the_check_has_a_stage() {
        for &area in Area::ALL {
            let stages = SurveyStage::ALL.iter().filter(|s| s.area() == area).count();
            match area {
                Area::Check => assert_eq!(stages, 0),
                Area::Wakeup => assert_eq!(stages, 2, "idle and loaded"),
                _ => assert_eq!(stages, 1, "{area}"),
            }
        }
    }

    #[test]
    fn areas_group_survey_series_and_fall_back_to_the_command() {
        assert_eq!(area_of("survey", "wakeup-idle/thread0"), Some(Area::Wakeup));
        assert_eq!(area_of("survey", "ipc/rtlab-shm/rtt"), Some(Area::Ipc));
        assert_eq!(area_of("survey", "check/preempt"), Some(Area::Check));
        assert_eq!(area_of("net run", "1KiB@1ms/rtt"), Some(Area::Net));
        assert_eq!(area_of("wakeup", "thread0"), Some(Area::Wakeup));
        assert_eq!(area_of("watch", "cyclictest/wakeup"), None);
        assert_eq!(command_word("net run"), "net");
    }
}
