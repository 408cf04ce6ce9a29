//! Plain words for the flags of ZooKeeper, Redis and etcd locks (database flags are in
//! [`crate::dbtext`]): a short badge label and a sentence saying what the flag means for an
//! on-call engineer. Pure, so it is unit-tested on the host.

/// A flag as a short badge label.
pub fn flag_label(flag: &str) -> String {
    match flag {
        "waiters_not_visible" => "waiters not visible".into(),
        "waiters_not_stored" => "waiters not stored".into(),
        "no_expiry" => "no expiry".into(),
        other => other.replace('_', " "),
    }
}

/// What a flag means, in a sentence; `None` for a flag without one.
pub fn flag_explanation(recipe: &str, flag: &str) -> Option<String> {
    Some(match flag {
        "waiters_not_visible" => match recipe {
            "shedlock" => "Nothing waits for a ShedLock lock: a job that finds it taken skips \
                 its run and tries again at its next scheduled run, so no waiter is ever shown."
                .into(),
            _ => "Waiters poll from the client (they retry after a pause): nothing on the \
                 server names them, so this page cannot show who waits."
                .into(),
        },
        "waiters_not_stored" => "Contenders of a single-key lock watch the key and retry: \
             etcd keeps nothing for them, so this page cannot show who waits."
            .into(),
        "no_expiry" => "No TTL: if the holder died, nothing will ever free this lock.".into(),
        "deadline_past" => "The deadline written in the value has passed: any client may take \
             the lock over."
            .into(),
        "leftover_queue" => "A queue or timeout set is left without the lock (its holder and \
             waiters are gone)."
            .into(),
        "stale_member" => "A holder's entry is past its lock timeout but still in the set: its \
             holder stopped refreshing (crashed, or lost the lock); the next acquire removes it."
            .into(),
        "members_cut" => "The set has more members than lockscope reads: the rest are not \
             shown."
            .into(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polled_waiters_are_explained_per_library() {
        assert!(flag_explanation("shedlock", "waiters_not_visible")
            .expect("explained")
            .contains("skips"));
        assert!(flag_explanation("redis_semaphore", "waiters_not_visible")
            .expect("explained")
            .contains("poll"));
        assert_eq!(flag_label("waiters_not_visible"), "waiters not visible");
        assert_eq!(flag_explanation("x", "something_else"), None);
    }
}
