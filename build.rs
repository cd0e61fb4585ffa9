//! `sqlx::migrate!` embeds `migrations/` at compile time; this makes a new
//! or changed migration file rebuild the crate, as sqlx's docs advise.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
