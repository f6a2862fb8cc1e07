//! Waiting on a run's live output ([`crate::LiveOutput`]) in tests that drive a running
//! command: until it shows what the test waits for, or a bound passes.

use std::time::Duration;

use crate::LiveOutput;

/// Wait up to `within` until the output so far contains `needle`; `Err` with the output
/// so far if it never does.
pub async fn wait_for_output(
    live: &LiveOutput,
    needle: &str,
    within: Duration,
) -> Result<(), String> {
    let waited = tokio::time::timeout(within, async {
        loop {
            let (text, written) = live.snapshot();
            if text.contains(needle) {
                return;
            }
            live.more_than(written).await;
        }
    })
    .await;
    match waited {
        Ok(()) => Ok(()),
        Err(_) => Err(format!(
            "{needle:?} never came within {within:?}; output so far: {:?}",
            live.snapshot().0
        )),
    }
}
