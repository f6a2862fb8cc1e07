//! Progress of a long call. When the client sent a `progressToken` with its request, the
//! call sends `notifications/progress` while it runs — the elapsed seconds as the
//! (increasing) progress, and in the message how long it has run, how much it has written
//! and the last lines of its output — at most one per [`PERIOD`], and none once the
//! result is on its way.

use std::future::Future;
use std::time::{Duration, Instant};

use caps::LiveOutput;
use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};
use tokio_util::sync::CancellationToken;

/// At most one notification per this long (and the first after it).
pub const PERIOD: Duration = Duration::from_millis(500);

/// Output shown in a progress message: the last this many bytes.
pub const TAIL_BYTES: usize = 2_000;

/// Where a call's progress goes, if its client asked for it.
pub struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    /// The run's output as it arrives (exec only).
    pub live: LiveOutput,
}

impl Progress {
    /// The progress of the request of `context`, if its client sent a progress token.
    pub fn of(context: &RequestContext<RoleServer>) -> Option<Progress> {
        let token = context.meta.get_progress_token()?;
        Some(Progress {
            peer: context.peer.clone(),
            token,
            live: LiveOutput::new(TAIL_BYTES),
        })
    }

    /// Drive `work` to its end, reporting progress meanwhile.
    pub async fn during<T>(self, work: impl Future<Output = T>) -> T {
        let stop = CancellationToken::new();
        let reporter = tokio::spawn(report(self, stop.clone()));
        let out = work.await;
        // Nothing may follow the result: the reporter finishes a send in progress (so it
        // is queued before the response) and sends nothing more.
        stop.cancel();
        let _ = reporter.await;
        out
    }
}

/// The message of one notification.
fn message(elapsed: Duration, live: &LiveOutput) -> String {
    let (tail, bytes) = live.snapshot();
    if let (0, Some(place)) = (bytes, live.elsewhere()) {
        format!(
            "running for {:.1} s on {place}; its output arrives with the result",
            elapsed.as_secs_f64()
        )
    } else if bytes == 0 {
        format!("running for {:.1} s; no output yet", elapsed.as_secs_f64())
    } else {
        format!(
            "running for {:.1} s; {bytes} bytes of output so far, ending with:\n{tail}",
            elapsed.as_secs_f64()
        )
    }
}

async fn report(progress: Progress, stop: CancellationToken) {
    let started = Instant::now();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + PERIOD, PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let elapsed = started.elapsed();
        let param = ProgressNotificationParam::new(progress.token.clone(), elapsed.as_secs_f64())
            .with_message(message(elapsed, &progress.live));
        if progress.peer.notify_progress(param).await.is_err() {
            // The client is gone; the call's own stop token ends the work.
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_says_how_long_and_shows_the_latest_output() {
        let live = LiveOutput::new(8);
        assert_eq!(
            message(Duration::from_millis(1500), &live),
            "running for 1.5 s; no output yet"
        );
        // A run on a node: its output is not seen until the result.
        let remote = LiveOutput::new(8);
        remote.runs_elsewhere("node build-box");
        assert_eq!(
            message(Duration::from_millis(2500), &remote),
            "running for 2.5 s on node build-box; its output arrives with the result"
        );
        let mut c =
            caps::OutputCollector::new(caps::OutputLimits::default()).with_live(Some(live.clone()));
        c.push(caps::Stream::Stdout, b"first line\nsecond\n");
        let text = message(Duration::from_secs(2), &live);
        assert!(
            text.starts_with("running for 2.0 s; 18 bytes of output so far"),
            "{text}"
        );
        assert!(
            text.ends_with("second\n") && !text.contains("first"),
            "{text}"
        );
    }
}
