//! The session's child objects beside its worker pod, one write each: the workspace PVC, the
//! NetworkPolicy and the Service by server-side apply (skipped when unchanged), the token Secret
//! created once and then remembered, and the skills' ConfigMaps read for the pod.

use crate::cache::{self, Tokens};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::kube_util::{admission_refusal, apply_owned, create_if_absent, new_token, token_of};
use crate::labels;
use crate::session::owned::session_key;
use crate::session::resources;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use kube_harness_crds::{HarnessSession, HarnessSessionStatus};

/// Server-side apply of a child object, unless exactly this was applied last and the object has
/// not changed since ([`cache::Caches::unchanged`]).
pub async fn apply_child<K>(ctx: &Context, ns: &str, obj: &K) -> Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let key = cache::child_key(ns, obj);
    let desired = serde_json::to_vec(obj)?;
    if ctx.caches.unchanged(&key, &desired) {
        return Ok(());
    }
    let version = apply_owned(&ctx.client, ns, obj).await?;
    ctx.caches.applied(key, &desired, version);
    Ok(())
}

/// A child write's outcome: `Some((reason, message))` when admission refused it (see
/// [`admission_refusal`]), any other error as it was.
pub fn refusal(written: Result<()>) -> Result<Option<(&'static str, String)>> {
    match written {
        Ok(()) => Ok(None),
        Err(Error::Kube(e)) => admission_refusal(&e).map(Some).ok_or(Error::Kube(e)),
        Err(e) => Err(e),
    }
}

/// The session's Service. One made by an older operator has a cluster IP, which cannot be changed
/// to `None`: the API server refuses the apply (422), and the Service is made again.
pub async fn ensure_service(ctx: &Context, ns: &str, svc: &Service) -> Result<()> {
    match apply_child::<Service>(ctx, ns, svc).await {
        Err(Error::Kube(kube::Error::Api(e))) if e.code == 422 => {
            let services: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
            let name = svc.name_any();
            tracing::info!(service = %name, namespace = ns, "making the Service again: headless now");
            services.delete(&name, &DeleteParams::foreground()).await?;
            // Foreground deletion: the name is free once the object is gone.
            for _ in 0..50 {
                if services.get_opt(&name).await?.is_none() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            apply_child::<Service>(ctx, ns, svc).await
        }
        other => other,
    }
}

/// The ConfigMaps the session's skills name, those that exist.
pub async fn skills_config_maps(session: &HarnessSession, ctx: &Context) -> Result<Vec<ConfigMap>> {
    let ns = session.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let mut out = Vec::new();
    for skill in &session.spec.workspace.skills {
        if let Some(cm) = api.get_opt(&skill.config_map).await? {
            out.push(cm);
        }
    }
    Ok(out)
}

/// The session's bearer token and its session-log token (with a session log), the uid of the
/// Secret that holds them, or why that Secret is not used.
pub struct SessionTokens {
    pub token: String,
    pub session_log: Option<String>,
    pub secret_uid: Option<String>,
    pub refused: Option<String>,
}

/// The session's tokens: remembered from the Secret once read or created (they never change),
/// else [`ensure_secret`]; `true` when the Secret was read or created just now.
pub async fn session_tokens(
    session: &HarnessSession,
    ctx: &Context,
    old: &HarnessSessionStatus,
) -> Result<(SessionTokens, bool)> {
    let uid = session.uid().unwrap_or_default();
    if let Some(t) = ctx.caches.tokens(&session_key(session), &uid) {
        let tokens = SessionTokens {
            token: t.token,
            session_log: t.session_log,
            secret_uid: old.token_secret_uid.clone(),
            refused: None,
        };
        return Ok((tokens, false));
    }
    Ok((ensure_secret(session, ctx, old).await?, true))
}

/// The session's token Secret: created once with a random token, never rotated by a reconcile
/// (that would lock out callers mid-session). Returns the token and the session-log token, and
/// remembers them.
pub async fn ensure_secret(
    session: &HarnessSession,
    ctx: &Context,
    old: &HarnessSessionStatus,
) -> Result<SessionTokens> {
    let tokens = ensure_secret_uncached(session, ctx, old).await?;
    if tokens.refused.is_some() {
        // Not remembered: the next reconcile reads the Secret again (deleted by then, perhaps).
        return Ok(tokens);
    }
    ctx.caches.remember_tokens(
        &session_key(session),
        Tokens {
            uid: session.uid().unwrap_or_default(),
            token: tokens.token.clone(),
            session_log: tokens.session_log.clone(),
        },
    );
    Ok(tokens)
}

/// Creates the Secret first (a new session, the common case, costs one request) and reads it only
/// when it exists already (a restarted operator, or another reconcile that won the race).
async fn ensure_secret_uncached(
    session: &HarnessSession,
    ctx: &Context,
    old: &HarnessSessionStatus,
) -> Result<SessionTokens> {
    let ns = session.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let name = labels::token_secret(&session.name_any());
    // Never the session log's own token: one scoped to this session's runs, which is all a user
    // who can read this Secret, or the worker pod, can then reach.
    let log_token = match session_log_token(ctx).await? {
        Some(server_token) => {
            let scope = resources::run_scope(session).ok_or(Error::MissingField("metadata.uid"))?;
            Some(
                kube_harness_session_log_client::scope::mint(&server_token, &scope)
                    .map_err(Error::SessionLogToken)?,
            )
        }
        None => None,
    };
    let token = new_token();
    let secret = resources::token_secret(session, &token, log_token.as_deref());
    if let Some(created) = create_if_absent(&secrets, &secret).await? {
        return Ok(SessionTokens {
            token,
            session_log: log_token,
            secret_uid: created.uid(),
            refused: None,
        });
    }
    let existing = secrets.get(&name).await?;
    // A Secret the operator did not make for this session (a tenant's, made before it) is never
    // used: its token would be the tenant's choice, and one without its keys stops the worker.
    if let Err(why) =
        crate::session::trust::owned_secret(&existing, session, old, log_token.is_some())
    {
        return Ok(SessionTokens {
            token: String::new(),
            session_log: None,
            secret_uid: None,
            refused: Some(why),
        });
    }
    let token = token_of(&existing).ok_or(Error::MissingField("token Secret key `token`"))?;
    let session_log = existing
        .data
        .as_ref()
        .and_then(|d| d.get("session-log-token"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned());
    Ok(SessionTokens {
        token,
        session_log,
        secret_uid: existing.uid(),
        refused: None,
    })
}

/// The session log token from the operator's Secret, if a session log is configured.
async fn session_log_token(ctx: &Context) -> Result<Option<String>> {
    let Some(name) = &ctx.config.session_log_token_secret else {
        return Ok(None);
    };
    if let Some(token) = ctx.caches.server_token() {
        return Ok(token);
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let secret = secrets.get(name).await?;
    let token = token_of(&secret).map(|t| t.trim().to_string());
    ctx.caches.remember_server_token(token.clone());
    Ok(token)
}
