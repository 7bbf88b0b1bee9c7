//! API errors by kind, for decisions (retry, re-read, give up) and for metrics.

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
    /// Transport failures, timeouts, 5xx.
    Other,
}

impl ApiErrorKind {
    pub fn of(error: &kube::Error) -> Self {
        let kube::Error::Api(status) = error else {
            return Self::Other;
        };
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
        } else {
            Self::Other
        }
    }

    /// The state changed under us: re-read, then decide again.
    pub fn is_stale_read(self) -> bool {
        matches!(self, Self::Conflict | Self::Invalid)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Conflict => "conflict",
            Self::Invalid => "invalid",
            Self::NotFound => "not_found",
            Self::AlreadyExists => "already_exists",
            Self::Forbidden => "forbidden",
            Self::TooManyRequests => "too_many_requests",
            Self::Other => "other",
        }
    }
}
