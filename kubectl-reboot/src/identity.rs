//! Who runs the plugin, for the record of `abandon`: the user the API server authenticated
//! (a SelfSubjectReview, which every authenticated user may create), else the kubeconfig's
//! user name, else `unknown`.

use crate::cli::Global;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::{Api, Client, api::PostParams, config::Kubeconfig};

/// The caller's name as the API server knows it, or as the kubeconfig names it.
pub async fn caller(client: &Client, global: &Global) -> String {
    if let Some(name) = reviewed(client).await {
        return name;
    }
    match kubeconfig_user(global) {
        Some(user) => format!("{user} (kubeconfig user)"),
        None => "unknown".to_owned(),
    }
}

/// The API server's answer to "who am I"; `None` if it cannot answer (an older server, or
/// an authorizer that refuses it).
async fn reviewed(client: &Client) -> Option<String> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    match api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
    {
        Ok(review) => review.status?.user_info?.username.filter(|u| !u.is_empty()),
        // The kubeconfig's user is named instead.
        Err(_) => None,
    }
}

/// The user of the kubeconfig context in use.
fn kubeconfig_user(global: &Global) -> Option<String> {
    let config = match crate::kubeconfig(global) {
        Ok(Some(config)) => config,
        Ok(None) => Kubeconfig::read().ok()?,
        Err(_) => return None,
    };
    user_of(&config, global.context.as_deref())
}

fn user_of(config: &Kubeconfig, context: Option<&str>) -> Option<String> {
    let name = context.or(config.current_context.as_deref())?;
    config
        .contexts
        .iter()
        .find(|c| c.name == name)?
        .context
        .as_ref()?
        .user
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_of_the_context_in_use() {
        let config = Kubeconfig::from_yaml(
            "apiVersion: v1\nkind: Config\ncurrent-context: a\ncontexts:\n\
             - name: a\n  context: {cluster: c, user: alice}\n\
             - name: b\n  context: {cluster: c, user: bob}\n",
        )
        .unwrap();
        assert_eq!(user_of(&config, None).as_deref(), Some("alice"));
        assert_eq!(user_of(&config, Some("b")).as_deref(), Some("bob"));
        assert_eq!(user_of(&config, Some("z")), None);
    }
}
