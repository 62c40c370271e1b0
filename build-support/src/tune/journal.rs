//! What a search keeps and tells: the journal of a kernel's measurements
//! (so that an interrupted search resumes) and the progress it reports.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use ktune_core::db::Gpu;
use ktune_core::ir::Kernel;
use ktune_core::schedule::Schedule;
use ktune_core::{GENERATOR_VERSION, canon};
use serde::{Deserialize, Serialize};

use super::Timing;

/// Where a search reports what it measures.
pub trait Observer {
    /// A candidate was measured (not a journal's replay): its time or why
    /// it was rejected. By default, a [`measured_line`].
    fn measured(&mut self, schedule: &Schedule, result: &Result<Timing, String>) {
        self.line(&measured_line(schedule, result));
    }
    /// A line of news.
    fn line(&mut self, text: &str);
}

/// A measurement as one line: the time and the schedule (marked when the
/// GPU was throttling), or why it was rejected.
pub fn measured_line(schedule: &Schedule, result: &Result<Timing, String>) -> String {
    match result {
        Ok(t) if t.throttled => format!(
            "  {:>10.2} µs  {}  (throttled: the time is suspect)",
            t.median_us,
            schedule.to_json()
        ),
        Ok(t) => format!("  {:>10.2} µs  {}", t.median_us, schedule.to_json()),
        Err(why) => format!("  rejected       {}: {why}", schedule.to_json()),
    }
}

/// Measurements of one kernel on one device for one target, kept on disk
/// so that an interrupted search resumes.
#[derive(Debug)]
pub struct Journal {
    path: Option<PathBuf>,
    entries: HashMap<Schedule, Result<Timing, String>>,
    /// Whether the file's last line lacks its newline (a run killed
    /// mid-write): the next entry starts a line of its own.
    torn: bool,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    schedule: Schedule,
    result: Result<Timing, String>,
}

impl Journal {
    /// A journal that is not kept.
    pub fn in_memory() -> Journal {
        Journal {
            path: None,
            entries: HashMap::new(),
            torn: false,
        }
    }

    /// The journal of `kernel` on `gpu` under `dir`, with what it holds.
    /// Lines that do not parse (a run killed mid-write) are skipped. Its
    /// file is named after the code generator's version too: what another
    /// version's code measured answers nothing.
    pub fn open(dir: &Path, kernel: &Kernel, gpu: &Gpu) -> Journal {
        let shape: Vec<String> = kernel.dims.iter().map(|d| d.size.to_string()).collect();
        let device: String = gpu
            .name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let path = dir.join(format!(
            "{}-{}-{}-{}-g{GENERATOR_VERSION}.jsonl",
            kernel.name,
            &canon::checksum(kernel)[..12],
            shape.join("x"),
            device
        ));
        // Bytes, not text: a line torn within a character is one bad line,
        // not an unreadable file.
        let bytes = std::fs::read(&path).unwrap_or_default();
        let entries = bytes
            .split(|b| *b == b'\n')
            .filter_map(|line| serde_json::from_slice::<Entry>(line).ok())
            .map(|e| (e.schedule, e.result))
            .collect();
        Journal {
            path: Some(path),
            entries,
            torn: bytes.last().is_some_and(|b| *b != b'\n'),
        }
    }

    pub fn get(&self, schedule: &Schedule) -> Option<&Result<Timing, String>> {
        self.entries.get(schedule)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(super) fn append(&mut self, schedule: &Schedule, result: &Result<Timing, String>) {
        self.entries.insert(schedule.clone(), result.clone());
        let Some(path) = &self.path else { return };
        let line = serde_json::to_string(&Entry {
            schedule: schedule.clone(),
            result: result.clone(),
        });
        // The journal only saves work: a failure to keep it costs a
        // re-measurement after an interruption, nothing else.
        if let (Ok(line), Some(Ok(mut file))) = (
            line,
            path.parent()
                .map(|d| std::fs::create_dir_all(d).and_then(|()| append_to(path))),
        ) {
            // One write a line, its newline included, so that a run killed
            // mid-write tears this line alone.
            let start = if std::mem::take(&mut self.torn) {
                "\n"
            } else {
                ""
            };
            let _ = file.write_all(format!("{start}{line}\n").as_bytes());
        }
    }
}

fn append_to(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Where a search reports its progress: a log file under the target
/// directory and, because Cargo hides build scripts' output, the terminal
/// when there is one.
#[derive(Debug, Default)]
pub struct Progress {
    log: Option<File>,
    tty: Option<File>,
}

impl Progress {
    /// Progress into `log` (appended) and the controlling terminal, if any.
    pub fn open(log: &Path) -> Progress {
        let log = log
            .parent()
            .and_then(|d| std::fs::create_dir_all(d).ok())
            .and_then(|()| append_to(log).ok());
        let tty = OpenOptions::new().write(true).open("/dev/tty").ok();
        Progress { log, tty }
    }

    /// Progress into `log` (appended) only.
    pub fn log_only(log: &Path) -> Progress {
        Progress {
            tty: None,
            ..Progress::open(log)
        }
    }

    /// Progress nowhere.
    pub fn silent() -> Progress {
        Progress::default()
    }
}

impl Observer for Progress {
    fn line(&mut self, text: &str) {
        for sink in [&mut self.log, &mut self.tty].into_iter().flatten() {
            let _ = writeln!(sink, "ktune: {text}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttled_times_are_marked_and_unthrottled_ones_keep_their_json() {
        let schedule = Schedule::Generic { block: 128 };
        let mut timing = Timing {
            median_us: 12.5,
            low_us: 12.0,
            high_us: 13.0,
            samples: 40,
            throttled: false,
        };
        let json = serde_json::to_string(&timing).expect("serialises");
        assert!(!json.contains("throttled"), "{json}");
        assert_eq!(
            serde_json::from_str::<Timing>(&json).expect("parses"),
            timing
        );
        assert!(!measured_line(&schedule, &Ok(timing)).contains("throttled"));

        timing.throttled = true;
        let line = measured_line(&schedule, &Ok(timing));
        assert!(
            line.contains("12.50 µs") && line.contains("throttled"),
            "{line}"
        );
        let json = serde_json::to_string(&timing).expect("serialises");
        assert!(json.contains("\"throttled\":true"), "{json}");
    }
}
