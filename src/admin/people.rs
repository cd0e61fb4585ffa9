//! A workspace's people (console sign-ins): adding one with a one-time
//! password, changing a role, removing one. Shared by `voxline admin user`
//! and the console's team page, so both keep the same rules: an address
//! signs in to one workspace only, and a workspace keeps at least one owner.

use crate::access::password::{self, HashError};
use crate::domain::{Email, OrgId, Role, UserId};
use crate::store::users::{NewUser, UserRow};
use crate::store::{Store, StoreError};

/// Why a change to a workspace's people was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum PeopleError {
    /// The address already signs in (here or in another workspace).
    #[error("{0} already has a sign-in")]
    EmailTaken(String),
    /// No such person in the workspace.
    #[error("no person with id {0} in this workspace")]
    NotFound(String),
    /// The change would leave the workspace without an owner.
    #[error("a workspace keeps at least one owner")]
    LastOwner,
    /// A person cannot remove themselves (another owner must).
    #[error("you cannot remove yourself; another owner can")]
    Yourself,
    /// The password could not be hashed.
    #[error(transparent)]
    Hash(#[from] HashError),
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for PeopleError {
    fn from(err: StoreError) -> Self {
        Self::Store(err)
    }
}

/// A person just added, with the one-time password to hand them (shown
/// only now; only its hash is stored).
#[derive(Debug, Clone)]
pub struct AddedPerson {
    /// The person's row.
    pub person: UserRow,
    /// Their first password; they change it on their account page.
    pub one_time_password: String,
}

/// Adds `email` to `org_id` with `role` and a fresh one-time password.
pub async fn add_person(
    store: &Store,
    org_id: OrgId,
    email: &Email,
    role: Role,
    now_ms: i64,
) -> Result<AddedPerson, PeopleError> {
    let one_time = password::one_time();
    let password_hash = password::hash(&one_time)?;
    let id = UserId::new();
    let inserted = store
        .insert_user(&NewUser {
            id,
            org_id,
            email: email.as_str(),
            password_hash: &password_hash,
            role,
            now_ms,
        })
        .await;
    match inserted {
        Ok(()) => {}
        Err(StoreError::Conflict(_)) => {
            return Err(PeopleError::EmailTaken(email.as_str().to_lowercase()));
        }
        Err(other) => return Err(other.into()),
    }
    let person = store
        .user(org_id, id)
        .await?
        .ok_or_else(|| PeopleError::NotFound(id.to_string()))?;
    Ok(AddedPerson {
        person,
        one_time_password: one_time.expose().to_string(),
    })
}

/// The person `id` names in `org_id`; a text that is no person id names none.
pub async fn person(store: &Store, org_id: OrgId, id: &str) -> Result<UserRow, PeopleError> {
    let missing = || PeopleError::NotFound(id.to_string());
    let parsed: UserId = id.parse().map_err(|_| missing())?;
    store.user(org_id, parsed).await?.ok_or_else(missing)
}

/// Gives person `id` of `org_id` the role `role`; refused when it would
/// demote the workspace's last owner. Open sessions get it on their next request.
pub async fn change_role(
    store: &Store,
    org_id: OrgId,
    id: UserId,
    role: Role,
) -> Result<(), PeopleError> {
    match store.set_user_role(org_id, id, role).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(PeopleError::NotFound(id.to_string())),
        Err(StoreError::Conflict(_)) => Err(PeopleError::LastOwner),
        Err(other) => Err(other.into()),
    }
}

/// Removes person `id` from `org_id` and ends their sessions; `acting` is
/// the person asking, who may not remove themselves (the CLI passes `None`).
/// The workspace's last owner is never removed.
pub async fn remove_person(
    store: &Store,
    org_id: OrgId,
    id: UserId,
    acting: Option<UserId>,
) -> Result<(), PeopleError> {
    if acting == Some(id) {
        return Err(PeopleError::Yourself);
    }
    match store.delete_user(org_id, id).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(PeopleError::NotFound(id.to_string())),
        Err(StoreError::Conflict(_)) => Err(PeopleError::LastOwner),
        Err(other) => Err(other.into()),
    }
}
