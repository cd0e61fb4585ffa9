//! `Chrome`: what every page's layout shows around its content: who is
//! signed in, the navigation their role opens, and the CSRF token forms carry.

use super::session::ConsoleUser;
use crate::domain::Role;

/// The navigation's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// `/`: charts of the workspace's calls.
    Overview,
    /// `/calls`.
    Calls,
    /// `/agents`.
    Agents,
    /// `/batches`.
    Batches,
    /// `/ratings`.
    Ratings,
    /// `/keys`.
    Keys,
    /// `/webhooks`.
    Webhooks,
    /// `/do-not-call`: numbers no path dials.
    DoNotCall,
    /// `/wallet`.
    Wallet,
    /// `/settings`.
    Settings,
    /// `/team`.
    Team,
    /// `/account`: the person's own password.
    Account,
}

impl Nav {
    /// Entries in menu order with their path, label and the least role that
    /// opens them.
    const MENU: [(Nav, &'static str, &'static str, Role); 11] = [
        (Nav::Overview, "/", "Overview", Role::Viewer),
        (Nav::Calls, "/calls", "Calls", Role::Viewer),
        (Nav::Agents, "/agents", "Agents", Role::Viewer),
        (Nav::Batches, "/batches", "Batches", Role::Viewer),
        (Nav::Ratings, "/ratings", "Ratings", Role::Viewer),
        (Nav::DoNotCall, "/do-not-call", "Do not call", Role::Viewer),
        (Nav::Keys, "/keys", "API keys", Role::Admin),
        (Nav::Webhooks, "/webhooks", "Webhooks", Role::Admin),
        (Nav::Wallet, "/wallet", "Wallet", Role::Viewer),
        (Nav::Settings, "/settings", "Settings", Role::Admin),
        (Nav::Team, "/team", "Team", Role::Owner),
    ];
}

/// One navigation link.
#[derive(Debug, Clone)]
pub struct NavItem {
    /// Its path.
    pub href: &'static str,
    /// Its text.
    pub label: &'static str,
    /// Whether it is the current page.
    pub active: bool,
}

/// The layout's data.
#[derive(Debug, Clone)]
pub struct Chrome {
    /// The signed-in person's email.
    pub email: String,
    /// Their role.
    pub role: Role,
    /// Their workspace's name.
    pub workspace: String,
    /// The session's CSRF token.
    pub csrf: String,
    /// The current page's entry.
    pub nav: Nav,
}

impl Chrome {
    /// The layout for `user` on the page `nav`.
    pub fn new(user: &ConsoleUser, nav: Nav) -> Self {
        Self {
            email: user.email.clone(),
            role: user.role,
            workspace: user.workspace.clone(),
            csrf: user.csrf.clone(),
            nav,
        }
    }

    /// The entries this person's role opens.
    pub fn nav_items(&self) -> Vec<NavItem> {
        Nav::MENU
            .iter()
            .filter(|(_, _, _, min)| self.role >= *min)
            .map(|(nav, href, label, _)| NavItem {
                href,
                label,
                active: *nav == self.nav,
            })
            .collect()
    }

    /// Whether the person's role is at least `min` (templates show controls
    /// by it; handlers enforce it).
    pub fn can(&self, min: &str) -> bool {
        min.parse::<Role>().is_ok_and(|min| self.role >= min)
    }
}
