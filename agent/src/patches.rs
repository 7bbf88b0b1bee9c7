//! A patch the agent needs that `common::Transition` does not build (yet).

use common::AnnotationKeys;
use json_patch::{
    AddOperation, Patch, PatchOperation, TestOperation,
    jsonptr::{PointerBuf, Token},
};

fn annotation_path(key: &str) -> PointerBuf {
    PointerBuf::from_tokens([
        Token::new("metadata"),
        Token::new("annotations"),
        Token::new(key),
    ])
}

/// `reboot-in-progress` without a recorded boot id: record the current one, while the reboot
/// is still in progress, so that the next start can prove (or retry) the reboot.
pub fn record_boot_id(keys: &AnnotationKeys, boot_id: &str) -> Patch {
    Patch(vec![
        PatchOperation::Test(TestOperation {
            path: annotation_path(&keys.in_progress),
            value: "true".into(),
        }),
        PatchOperation::Add(AddOperation {
            path: annotation_path(&keys.boot_id),
            value: boot_id.into(),
        }),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_the_boot_id_only_while_in_progress() {
        let keys = AnnotationKeys::new("reboot.example.com").unwrap();
        let patch = record_boot_id(&keys, "b2");
        let mut node = json!({"metadata": {"annotations": {
            "reboot.example.com/reboot-in-progress": "true"}}});
        json_patch::patch(&mut node, &patch).unwrap();
        assert_eq!(
            node["metadata"]["annotations"]["reboot.example.com/reboot-boot-id"],
            json!("b2")
        );

        let mut finished = json!({"metadata": {"annotations": {"other": "x"}}});
        assert!(json_patch::patch(&mut finished, &patch).is_err());
    }
}
