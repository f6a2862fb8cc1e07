//! The signals a run's driver may send to its processes, by name — the names the MCP
//! `process` tool takes and the Bridge carries (numbers differ between systems; these are
//! Linux's, the only system whose providers deliver signals to a run).

/// Name (without `SIG`) and number of each signal a run may be sent.
pub const SIGNALS: [(&str, i32); 11] = [
    ("INT", 2),
    ("TERM", 15),
    ("HUP", 1),
    ("QUIT", 3),
    ("KILL", 9),
    ("USR1", 10),
    ("USR2", 12),
    ("STOP", 19),
    ("CONT", 18),
    ("WINCH", 28),
    ("ALRM", 14),
];

/// The name of signal `number`, if a run may be sent it.
pub fn signal_name(number: i32) -> Option<&'static str> {
    SIGNALS
        .iter()
        .find(|(_, n)| *n == number)
        .map(|(name, _)| *name)
}

/// The number of the signal named `name` (exactly as in [`SIGNALS`]), if a run may be
/// sent it.
pub fn signal_number(name: &str) -> Option<i32> {
    SIGNALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, number)| *number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_are_the_systems() {
        for (name, number) in SIGNALS {
            let system = nix::sys::signal::Signal::try_from(number).unwrap();
            assert_eq!(system.as_str(), format!("SIG{name}"));
            assert_eq!(signal_name(number), Some(name));
            assert_eq!(signal_number(name), Some(number));
        }
        assert_eq!(signal_number("SEGV"), None);
        assert_eq!(signal_name(11), None);
    }
}
