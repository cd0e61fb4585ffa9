//! The house rule that arrows point one way: no crate of the workspace may
//! hold a cycle of imports between its modules (files).
//!
//! Each file's `crate::`, `super::` and `self::` paths (in `use` lines and in
//! code) are resolved to the module file that defines the named item,
//! following `pub use` re-exports, and a cycle among those edges fails the
//! test with the files and the names that tie them. Comments and `#[cfg(test)]`
//! modules are left out: tests may reach anywhere. A module's reach into its
//! own descendants (a folder's `mod.rs` wiring its files) is composition and
//! is not counted; every edge between siblings, and from a child up to its
//! parent, is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path inside its crate, such as `calls::placement` (`""` is the root).
type ModPath = String;

/// One crate's modules: path → source without comments and test modules.
struct Crate {
    modules: BTreeMap<ModPath, String>,
    files: BTreeMap<ModPath, PathBuf>,
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}::{child}")
    }
}

fn parent_of(module: &str) -> String {
    module
        .rsplit_once("::")
        .map_or(String::new(), |(p, _)| p.to_string())
}

/// Drops `//` comments, string literals' contents and `#[cfg(test)]` items.
fn code_of(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            // Skip the next item: up to its balanced closing brace or `;`.
            let mut depth = 0i32;
            let mut opened = false;
            for item_line in lines.by_ref() {
                for ch in item_line.chars() {
                    match ch {
                        '{' => {
                            depth += 1;
                            opened = true;
                        }
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                if (opened && depth <= 0) || (!opened && item_line.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        let code = match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

fn load_crate(src: &Path) -> Crate {
    let mut modules = BTreeMap::new();
    let mut files = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read source dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            let last = parts.last().cloned().unwrap_or_default();
            if last == "main" && parts.len() == 1 {
                continue; // the binary is a crate of its own that imports the library
            }
            if last == "mod" || last == "lib" {
                parts.pop();
            }
            let module = parts.join("::");
            let source = std::fs::read_to_string(&path).expect("read source");
            modules.insert(module.clone(), code_of(&source));
            files.insert(module, path);
        }
    }
    Crate { modules, files }
}

/// Expands one `use` tree (`a::{b, c::d as e, f::*}`) into full paths.
fn expand_use(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let base = if head.is_empty() {
            prefix.to_string()
        } else if prefix.is_empty() {
            head.to_string()
        } else {
            format!("{prefix}::{head}")
        };
        let mut depth = 0;
        let mut start = 0;
        for (i, ch) in body.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&base, &body[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_use(&base, &body[start..], out);
    } else {
        let item = tree.split(" as ").next().unwrap_or("").trim();
        if item.is_empty() {
            return;
        }
        let full = if prefix.is_empty() {
            item.to_string()
        } else if item == "self" {
            prefix.to_string()
        } else {
            format!("{prefix}::{item}")
        };
        out.push(full);
    }
}

/// Every crate-relative path a module names, as written (`crate::…`, `super::…`, `self::…`).
fn named_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    // `use` statements, which may span lines and hold groups.
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().last();
        let after = &rest[at + 4..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = after.find(';') else { break };
        let tree: String = after[..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if tree.starts_with("crate::") || tree.starts_with("super::") || tree.starts_with("self::")
        {
            expand_use("", &tree, &mut paths);
        }
    }
    // Paths in code.
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(found) = code[from..].find(start) {
            let at = from + found;
            from = at + start.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let end = code[at..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| at + e);
            let path = code[at..end].trim_end_matches(':');
            paths.push(path.to_string());
        }
    }
    paths
}

/// Makes `path` (as written in `module`) absolute, without the `crate::`.
fn absolute(module: &str, path: &str) -> String {
    let mut base = module.to_string();
    let mut rest = path;
    loop {
        if let Some(r) = rest.strip_prefix("crate::") {
            base.clear();
            rest = r;
        } else if let Some(r) = rest.strip_prefix("super::") {
            base = parent_of(&base);
            rest = r;
        } else if let Some(r) = rest.strip_prefix("self::") {
            rest = r;
        } else {
            break;
        }
    }
    join(&base, rest)
}

/// The module that defines what `path` names, following `pub use` re-exports.
fn defining_module(
    krate: &Crate,
    reexports: &BTreeMap<(String, String), String>,
    path: &str,
) -> Option<String> {
    let segments: Vec<&str> = path
        .split("::")
        .filter(|s| !s.is_empty() && *s != "*")
        .collect();
    let mut module = String::new();
    let mut used = 0;
    for (i, segment) in segments.iter().enumerate() {
        let candidate = join(&module, segment);
        if krate.modules.contains_key(&candidate) {
            module = candidate;
            used = i + 1;
        } else {
            break;
        }
    }
    if let Some(name) = segments.get(used)
        && let Some(source) = reexports.get(&(module.clone(), (*name).to_string()))
    {
        return defining_module(krate, reexports, source);
    }
    Some(module)
}

fn edges(krate: &Crate) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    // Re-exports: (module, exported name) → absolute source path.
    let mut reexports = BTreeMap::new();
    for (module, code) in &krate.modules {
        for line in code.split(';') {
            let line = line.trim();
            let Some(tree) = line.strip_prefix("pub use ") else {
                continue;
            };
            let mut expanded = Vec::new();
            let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
            expand_use("", &tree, &mut expanded);
            for path in expanded {
                let name = path.rsplit("::").next().unwrap_or("").to_string();
                let source = if path.starts_with("crate::")
                    || path.starts_with("super::")
                    || path.starts_with("self::")
                {
                    absolute(module, &path)
                } else if krate
                    .modules
                    .contains_key(&join(module, path.split("::").next().unwrap_or("")))
                {
                    join(module, &path)
                } else {
                    continue; // re-exported from another crate
                };
                reexports.insert((module.clone(), name), source);
            }
        }
    }
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (module, code) in &krate.modules {
        for path in named_paths(code) {
            let full = absolute(module, &path);
            let Some(target) = defining_module(krate, &reexports, &full) else {
                continue;
            };
            // A module reaching into its own children is composition (a folder's
            // mod.rs wiring its rooms), not an import between peers.
            if target == *module || target.starts_with(&format!("{module}::")) || module.is_empty()
            {
                continue;
            }
            let name = full.rsplit("::").next().unwrap_or("").to_string();
            graph
                .entry(module.clone())
                .or_default()
                .entry(target)
                .or_default()
                .insert(name);
        }
    }
    graph
}

/// Strongly connected components of more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            self.index.insert(v, self.next);
            self.low.insert(v, self.next);
            self.next += 1;
            self.stack.push(v);
            self.on_stack.insert(v);
            if let Some(targets) = self.graph.get(v) {
                for w in targets.keys() {
                    let w = w.as_str();
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let low = self.low[v].min(self.low[w]);
                        self.low.insert(v, low);
                    } else if self.on_stack.contains(w) {
                        let low = self.low[v].min(self.index[w]);
                        self.low.insert(v, low);
                    }
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

fn cycle_report(root: &Path) -> Vec<String> {
    let krate = load_crate(root);
    let graph = edges(&krate);
    cycles(&graph)
        .into_iter()
        .map(|component| {
            let members: BTreeSet<&String> = component.iter().collect();
            let mut lines = vec![format!("cycle among {} modules:", component.len())];
            for from in &component {
                for (to, names) in graph.get(from).into_iter().flatten() {
                    if members.contains(to) {
                        let names: Vec<&str> = names.iter().map(String::as_str).collect();
                        lines.push(format!(
                            "  {} -> {}: {}",
                            krate.files[from].display(),
                            krate.files[to].display(),
                            names.join(", ")
                        ));
                    }
                }
            }
            lines.join("\n")
        })
        .collect()
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut report = Vec::new();
    for src in ["src", "actors/src", "media/src"] {
        report.extend(cycle_report(&root.join(src)));
    }
    assert!(report.is_empty(), "import cycles:\n{}", report.join("\n"));
}

#[test]
fn the_checker_sees_a_cycle_through_use_groups_super_and_reexports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    std::fs::create_dir_all(src.join("calls")).expect("mkdir");
    std::fs::write(src.join("lib.rs"), "pub mod calls;\npub mod state;\n").expect("write");
    std::fs::write(
        src.join("calls/mod.rs"),
        "pub mod dispatch;\npub mod placement;\npub use placement::bypasses;\n",
    )
    .expect("write");
    std::fs::write(
        src.join("calls/dispatch.rs"),
        "use crate::{state::State, calls::bypasses};\npub fn job_for() {}\n",
    )
    .expect("write");
    std::fs::write(
        src.join("calls/placement.rs"),
        "// use crate::state::State; is a comment\npub fn bypasses() { super::dispatch::job_for() }\n#[cfg(test)]\nmod tests {\n    use crate::state::State;\n}\n",
    )
    .expect("write");
    std::fs::write(src.join("state.rs"), "pub struct State;\n").expect("write");
    let report = cycle_report(src);
    assert_eq!(report.len(), 1, "{report:?}");
    assert!(
        report[0].contains("dispatch.rs") && report[0].contains("placement.rs"),
        "{}",
        report[0]
    );
    assert!(!report[0].contains("state.rs"), "{}", report[0]);

    std::fs::write(src.join("calls/placement.rs"), "pub fn bypasses() {}\n").expect("write");
    assert!(cycle_report(src).is_empty());
}
