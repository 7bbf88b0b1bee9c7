//! The ledger Leases of deleted pools: once a `RebootPool` object is gone (its finalizer
//! released it, so its ledger held no slot), its Lease is left behind with nothing to do.
//! The leader deletes such Leases each time it starts leading the pools, which it does again
//! after every change of the pools: the sweep looks at the Leases as they are, not at the
//! pools this replica ran, so a pool that was deleted while another replica led, or whose
//! object was gone before this replica ever ran it, is cleaned up too.

use common::{
    ledger::{FORMAT_ANNOTATION, slots_of},
    pool::{LEDGER_PREFIX, RebootPool},
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Preconditions},
};

/// A ledger Lease of a pool that may be gone, holding no slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnusedLedger {
    pub lease: String,
    pub pool: String,
    /// The version read: the Lease is deleted only as it was read empty.
    pub resource_version: String,
}

/// The pools' ledger Leases among `leases` that hold no slot: named with the pools' prefix,
/// written by a controller (they carry the format annotation), and not the flags' pool's
/// ledger (`--ledger-name` may be given any name). A Lease whose slots cannot be read is
/// kept: it may hold a reboot under way.
pub fn unused_pool_ledgers(leases: &[Lease], own_ledger: &str) -> Vec<UnusedLedger> {
    leases
        .iter()
        .filter_map(|lease| {
            let name = lease.metadata.name.as_deref()?;
            let pool = name.strip_prefix(LEDGER_PREFIX)?;
            let annotations = lease.metadata.annotations.as_ref();
            let ours = annotations.is_some_and(|a| a.contains_key(FORMAT_ANNOTATION));
            let empty = slots_of(annotations).is_ok_and(|slots| slots.is_empty());
            let resource_version = lease.metadata.resource_version.clone()?;
            (name != own_ledger && !pool.is_empty() && ours && empty).then(|| UnusedLedger {
                lease: name.to_owned(),
                pool: pool.to_owned(),
                resource_version,
            })
        })
        .collect()
}

/// Deletes the ledger Leases in `namespace` whose `RebootPool` is gone, as read now (a pool
/// being deleted keeps its ledger until its object is gone). Each delete is conditional on
/// the version read, so a Lease written since (a pool of that name made again) is kept.
pub async fn delete_ledgers_of_gone_pools(client: &Client, namespace: &str, own_ledger: &str) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let pools: Api<RebootPool> = Api::all(client.clone());
    let listed = match leases.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(error) => {
            tracing::warn!(%error, %namespace, "cannot list the Leases to delete the ledgers of deleted pools; retried when the pools change or the leader changes");
            return;
        }
    };
    for unused in unused_pool_ledgers(&listed, own_ledger) {
        match pools.get_opt(&unused.pool).await {
            Ok(None) => {}
            Ok(Some(_)) => continue,
            Err(error) => {
                tracing::warn!(pool = %unused.pool, %error, "cannot read the pool; its ledger Lease is kept for now");
                continue;
            }
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(unused.resource_version.clone()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match leases.delete(&unused.lease, &params).await {
            Ok(_) => {
                tracing::info!(pool = %unused.pool, lease = %unused.lease, "deleted the ledger Lease of a deleted pool");
            }
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                tracing::debug!(lease = %unused.lease, "the ledger Lease changed or is gone already; kept as it is");
            }
            Err(error) => {
                tracing::warn!(pool = %unused.pool, lease = %unused.lease, %error, "cannot delete the ledger Lease of a deleted pool; it holds no slot and is tried again when the pools change");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::ledger::SLOTS_ANNOTATION;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn lease(name: &str, annotations: &[(&str, &str)]) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                resource_version: Some("7".to_owned()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..ObjectMeta::default()
            },
            spec: None,
        }
    }

    #[test]
    fn only_empty_ledgers_of_pools_are_candidates_for_deletion() {
        let format = (FORMAT_ANNOTATION, "1");
        let slots = r#"{"n1":{"grant":"g1","grantedAt":"2026-12-02T00:00:00Z"}}"#;
        let one = lease("x", &[(SLOTS_ANNOTATION, slots)]);
        assert_eq!(
            slots_of(one.metadata.annotations.as_ref()).unwrap().len(),
            1
        );
        let leases = [
            lease("node-reboot-pool-gpu", &[format]),
            lease("node-reboot-pool-web", &[format, (SLOTS_ANNOTATION, "{}")]),
            // A slot: a reboot may be under way.
            lease("node-reboot-pool-db", &[format, (SLOTS_ANNOTATION, slots)]),
            // Unreadable slots are kept too.
            lease("node-reboot-pool-odd", &[format, (SLOTS_ANNOTATION, "[")]),
            // Not written by a controller.
            lease("node-reboot-pool-someone", &[]),
            // The flags' pool's ledger and the leader election's Lease.
            lease("node-reboot-operator-slots", &[format]),
            lease("node-reboot-pool-flags", &[format]),
            lease("node-reboot-pool-", &[format]),
        ];
        let pools: Vec<String> = unused_pool_ledgers(&leases, "node-reboot-pool-flags")
            .into_iter()
            .map(|u| u.pool)
            .collect();
        assert_eq!(pools, ["gpu", "web"]);
    }
}
