//! API errors by kind, for decisions (retry, re-read, give up) and for metrics.

use kube::runtime::watcher;

/// What an API error means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApiErrorKind {
    /// resourceVersion precondition failed: re-read and decide again.
    Conflict,
    /// A JSON Patch `test` failed (or the object is otherwise invalid): the state moved on.
    Invalid,
    NotFound,
    AlreadyExists,
    Forbidden,
    /// 429: an eviction that a PodDisruptionBudget does not allow now, or throttling.
    TooManyRequests,
    /// The request did not get an answer in time (ours or the server's timeout).
    Timeout,
    /// Transport failures, 5xx, anything else.
    Other,
}

impl ApiErrorKind {
    pub fn of(error: &kube::Error) -> Self {
        let kube::Error::Api(status) = error else {
            return Self::Other;
        };
        Self::of_status(status)
    }

    pub fn of_status(status: &kube::core::Status) -> Self {
        if status.is_conflict() {
            Self::Conflict
        } else if status.is_invalid() {
            Self::Invalid
        } else if status.is_not_found() {
            Self::NotFound
        } else if status.is_already_exists() {
            Self::AlreadyExists
        } else if status.is_forbidden() {
            Self::Forbidden
        } else if status.code == 429 {
            Self::TooManyRequests
        } else if status.code == 504 {
            Self::Timeout
        } else {
            Self::Other
        }
    }

    /// The kind of a failed list or watch.
    pub fn of_watcher(error: &watcher::Error) -> Self {
        match error {
            watcher::Error::InitialListFailed(e)
            | watcher::Error::WatchStartFailed(e)
            | watcher::Error::WatchFailed(e) => Self::of(e),
            watcher::Error::WatchError(status) => Self::of_status(status),
            watcher::Error::NoResourceVersion => Self::Other,
        }
    }

    /// The state changed under us: re-read, then decide again.
    pub fn is_stale_read(self) -> bool {
        matches!(self, Self::Conflict | Self::Invalid)
    }

    /// The label value in the error metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Conflict => "conflict",
            Self::Invalid => "invalid",
            Self::NotFound => "not_found",
            Self::AlreadyExists => "already_exists",
            Self::Forbidden => "forbidden",
            Self::TooManyRequests => "too_many_requests",
            Self::Timeout => "timeout",
            Self::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("x", reason).with_code(code),
        ))
    }

    #[test]
    fn statuses_are_classified() {
        let table = [
            (409, "Conflict", ApiErrorKind::Conflict),
            (422, "Invalid", ApiErrorKind::Invalid),
            (404, "NotFound", ApiErrorKind::NotFound),
            (409, "AlreadyExists", ApiErrorKind::AlreadyExists),
            (403, "Forbidden", ApiErrorKind::Forbidden),
            (429, "TooManyRequests", ApiErrorKind::TooManyRequests),
            (504, "Timeout", ApiErrorKind::Timeout),
            (500, "InternalError", ApiErrorKind::Other),
        ];
        for (code, reason, kind) in table {
            assert_eq!(
                ApiErrorKind::of(&status(code, reason)),
                kind,
                "{code} {reason}"
            );
        }
    }
}
