//! The test-kit (feature `testkit`): what the workspace's test suites share instead of
//! copying — memory worlds with programs in them, scripted command outputs, probes of real
//! processes for end-to-end tests, and waits on a running command's output. Never compiled into the product.

mod live;
mod outputs;
mod procs;
mod shared_fs;
mod worlds;

pub use live::wait_for_output;
pub use outputs::{failed_output, ok_output, output};
pub use procs::{pids_with_cmdline, pids_with_cmdline_words, process_alive, read_pid, wait_gone};
pub use shared_fs::SharedMemoryFs;
pub use worlds::MemoryWorld;
