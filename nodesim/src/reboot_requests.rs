//! Wakes a simulated node the moment its agent's reboot command touches the request file in
//! the node's directory, as a real machine goes down the moment `systemctl reboot` runs. The
//! node's poll stays as the fallback: without this, a reboot began up to one poll late, which
//! a rolling reboot's makespan counted as the operator's.
//!
//! One inotify instance serves a whole fleet: Linux allows 128 per user by default, and tests
//! run several fleets at once.

use futures::StreamExt;
use inotify::{Inotify, WatchDescriptor, WatchMask};
use std::{collections::HashMap, io, path::PathBuf, sync::Arc};
use tokio::{sync::Notify, task::JoinHandle};

/// Watches every node directory; a file created or touched in one wakes that node's `Notify`.
/// The task ends when aborted (the fleet stops).
pub fn watch(dirs: &[(PathBuf, Arc<Notify>)]) -> io::Result<JoinHandle<()>> {
    let inotify = Inotify::init()?;
    let mut wakers: HashMap<WatchDescriptor, Arc<Notify>> = HashMap::new();
    for (dir, wake) in dirs {
        // `touch` creates the file, or changes its times when it is there already.
        let wd = inotify
            .watches()
            .add(dir, WatchMask::CREATE | WatchMask::ATTRIB)?;
        wakers.insert(wd, wake.clone());
    }
    let mut events = inotify.into_event_stream([0u8; 4096])?;
    Ok(tokio::spawn(async move {
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    if let Some(wake) = wakers.get(&event.wd) {
                        wake.notify_one();
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "reading the reboot requests failed; nodes fall back to their poll");
                    return;
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_touched_file_wakes_its_node_only() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let (wake_a, wake_b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let task = watch(&[(a.clone(), wake_a.clone()), (b, wake_b.clone())]).unwrap();
        std::fs::write(a.join("reboot-requested"), "").unwrap();
        tokio::time::timeout(Duration::from_secs(10), wake_a.notified())
            .await
            .expect("the node whose file was touched is woken");
        // The node takes the request (removes the file); the next reboot creates it again.
        std::fs::remove_file(a.join("reboot-requested")).unwrap();
        std::fs::write(a.join("reboot-requested"), "").unwrap();
        tokio::time::timeout(Duration::from_secs(10), wake_a.notified())
            .await
            .expect("woken again");
        assert!(
            tokio::time::timeout(Duration::from_millis(200), wake_b.notified())
                .await
                .is_err(),
            "the other node is not woken"
        );
        task.abort();
    }
}
