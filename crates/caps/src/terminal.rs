//! Runs on a pseudo-terminal ([`crate::ExecOptions::terminal`]): the size a terminal
//! starts with and is resized to. The provider creates the terminal for the run and holds
//! its controlling side; the command gets only the terminal's other side, as its standard
//! input, output and error and as its controlling terminal — never Warden's own terminal.

/// A terminal's size in character cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TerminalSize {
    /// Rows (lines).
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl TerminalSize {
    /// The largest size accepted in either direction: a terminal is a screen, and the
    /// kernel keeps the size only to tell programs.
    pub const MAX: u16 = 1000;

    /// The classic 24 × 80.
    pub const DEFAULT: TerminalSize = TerminalSize { rows: 24, cols: 80 };

    /// A size of `rows` × `cols`, each between 1 and [`TerminalSize::MAX`].
    pub fn new(rows: u16, cols: u16) -> Result<Self, String> {
        for (name, value) in [("rows", rows), ("cols", cols)] {
            if value == 0 || value > Self::MAX {
                return Err(format!(
                    "{name} must be between 1 and {}, got {value}",
                    Self::MAX
                ));
            }
        }
        Ok(TerminalSize { rows, cols })
    }
}

impl Default for TerminalSize {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_is_one_to_max_cells_each_way() {
        assert_eq!(TerminalSize::new(24, 80), Ok(TerminalSize::DEFAULT));
        assert!(TerminalSize::new(0, 80).unwrap_err().contains("rows"));
        assert!(TerminalSize::new(24, 1001).unwrap_err().contains("cols"));
        assert!(TerminalSize::new(1000, 1000).is_ok());
    }
}
