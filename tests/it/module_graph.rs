//! The house rule that arrows point one way, checked at two grains: no crate
//! of the workspace may hold a cycle of imports between its modules (files),
//! and no crate may hold a cycle between its rooms (the top-level folders and
//! files under the crate root: `src/calls/*` is the room `calls`). The room
//! check kept a ratchet, [`KNOWN_SRC_ROOM_EDGES`], for the `app` tangle of the
//! root crate while a refactor removed it; it is empty now, and may only stay
//! so. And some rooms only import: in
//! `actors/`, the sim room (`sim/`: the sim carrier, callee, providers and
//! analyst) uses the engine and nothing of the engine uses it
//! ([`ACTORS_IMPORT_ONLY_ROOMS`]).
//!
//! Each file's paths are resolved to the module file that defines the named
//! item, following `use` bindings and `pub use` re-exports to the file that
//! really defines it. The paths read are those starting with `crate::`,
//! `super::`, `self::`, the name of one of the module's own child modules
//! (`sim::SimAsr` in `providers/mod.rs`), or a module the file imported
//! (`use crate::store; store::calls::…`). Comments, string literals and
//! `#[cfg(test)]` items and modules are left out: tests may reach anywhere.
//!
//! A parent module's reach into its children is an edge like any other when
//! the parent uses a child's item in its own code. Only pure wiring is not:
//! `mod child;`, and a `pub use child::Item;` whose name the parent does not
//! use itself (its users' paths are followed through it to the child). One
//! kind of cycle is allowed: a folder's own file (`mod.rs`, or `foo.rs` beside
//! `foo/`) with files under that folder, since that file both holds what its
//! children share and wires them (`actors/src/engine/`, `media/src/carrier/`
//! and others are built so); cycles among the children, or through a
//! sub-folder, are still looked for with that file set aside. A cycle that
//! leaves the folder fails: `tools.rs` → `providers/mod.rs` (whose
//! `Providers::sim` built the sims) → `providers/sim.rs` →
//! `providers/sim_tools.rs` → `tools.rs` did, in `actors/`, and the older
//! check, which took every `mod.rs` → child reach for composition, missed it.
//! The sims have since moved to the sim room, and the import-only rule keeps
//! `providers` (or any engine room) from reaching back into them.
//!
//! Limits, kept because the crates do not hit them: a glob re-export's names
//! are not followed, and a re-exported trait the parent uses only through
//! method calls is not seen as used.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module's path inside its crate, such as `calls::placement` (`""` is the root).
type ModPath = String;

/// Module → module it names → the names that tie them (for the report).
type Graph = BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>>;

/// One crate's modules, test-only modules left out.
struct Crate {
    /// Module path → its code without comments, strings and test items.
    modules: BTreeMap<ModPath, String>,
    /// Module path → its file, as the report names it.
    files: BTreeMap<ModPath, String>,
}

/// The room of the root file (`lib.rs`), for the reports.
const ROOT_ROOM: &str = "(crate root)";

/// The root crate's room-level edges that close a cycle, known and meant to
/// go (issue 30). The `app` tangle once tied 13 of the 21 rooms under `src/`
/// into one cycle: the services took `app::state::AppState` (and
/// `app::config`'s settings) while `app/` imports the services. Now each
/// service room takes its own service struct built in `app/server.rs`,
/// settings are a room of their own (`config`), carriers forward statuses
/// through a trait the cluster implements, and `AppState` is the HTTP
/// layer's (`http::state`). The list is empty; the test fails on any room
/// cycle, and on an entry here that no longer closes one.
const KNOWN_SRC_ROOM_EDGES: &[(&str, &str)] = &[];

/// Rooms of `actors/` that no other room of the crate may import: they use the
/// engine, never the other way. `sim` is the simulated world (the sim carrier,
/// callee, ASR/LLM/TTS, analyst and scorer, and `Providers::sim`, which builds
/// the sim providers); the service picks it where it builds a call's carrier
/// and providers. An engine room that imports it fails, even without a cycle.
const ACTORS_IMPORT_ONLY_ROOMS: &[&str] = &["sim"];

/// `parent::child`, either of which may be the root (`""`).
fn join(parent: &str, child: &str) -> String {
    match (parent.is_empty(), child.is_empty()) {
        (true, _) => child.to_string(),
        (_, true) => parent.to_string(),
        _ => format!("{parent}::{child}"),
    }
}

/// The module that holds `module` (the root for a top-level one).
fn parent_of(module: &str) -> String {
    module
        .rsplit_once("::")
        .map_or(String::new(), |(p, _)| p.to_string())
}

/// Whether `module` is `ancestor` or inside it.
fn within(module: &str, ancestor: &str) -> bool {
    ancestor.is_empty() || module == ancestor || module.starts_with(&format!("{ancestor}::"))
}

/// The room a module belongs to: its first path segment.
fn room_of(module: &str) -> &str {
    match module.split("::").next() {
        Some("") | None => ROOT_ROOM,
        Some(room) => room,
    }
}

/// Whether `c` may be part of an identifier.
fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The source with comments removed and string and char literals emptied, so
/// neither a `crate::` in a doc line nor a brace in a string is read as code.
/// Line breaks are kept, so the result still reads line by line.
fn lex(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            // Block comments nest.
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
            continue;
        }
        let after_ident = out.chars().last().is_some_and(is_ident);
        if !after_ident && (c == 'r' || (c == 'b' && next == Some('r'))) {
            // A raw string, `r"…"`, `r#"…"#`, `br"…"` (`r#ident` is not one).
            let mut j = i + if c == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) == Some(&'"') {
                j += 1;
                while j < chars.len() {
                    if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
                        j += 1 + hashes;
                        break;
                    }
                    if chars[j] == '\n' {
                        out.push('\n');
                    }
                    j += 1;
                }
                out.push_str("\"\"");
                i = j;
                continue;
            }
        }
        if c == '"' {
            i += 1;
            while i < chars.len() {
                match chars[i] {
                    '\\' => i += 2,
                    '"' => {
                        i += 1;
                        break;
                    }
                    '\n' => {
                        out.push('\n');
                        i += 1;
                    }
                    _ => i += 1,
                }
            }
            out.push_str("\"\"");
            continue;
        }
        if c == '\'' {
            // A char literal ('x', '\n', '\u{..}'); otherwise a lifetime or label.
            if next == Some('\\') {
                let mut j = i + 3;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                out.push_str("' '");
                i = j + 1;
                continue;
            }
            if chars.get(i + 2) == Some(&'\'') {
                out.push_str("' '");
                i += 3;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The names of the child modules declared under `#[cfg(test)]` in lexed code.
fn test_only_children(code: &str) -> Vec<String> {
    let mut children = Vec::new();
    let mut after_cfg_test = false;
    for line in code.lines() {
        let mut rest = line.trim();
        if let Some(r) = rest.strip_prefix("#[cfg(test)]") {
            after_cfg_test = true;
            rest = r.trim();
        }
        if rest.is_empty() || rest.starts_with("#[") {
            continue; // further attributes between `#[cfg(test)]` and its item
        }
        if after_cfg_test {
            let item = rest
                .strip_prefix("pub ")
                .or_else(|| rest.split_once(") ").map(|(_, r)| r))
                .unwrap_or(rest);
            if let Some(name) = item.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                children.push(name.trim().to_string());
            }
        }
        after_cfg_test = false;
    }
    children
}

/// Lexed code without its `#[cfg(test)]` items.
fn without_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("#[cfg(test)]") {
            // Skip the item: up to its balanced closing brace or its `;`.
            let mut depth = 0i32;
            let mut opened = false;
            for item_line in std::iter::once(rest).chain(lines.by_ref()) {
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
        out.push_str(line);
        out.push('\n');
    }
    out
}

impl Crate {
    /// A crate from its files: paths relative to the crate's source root
    /// (`lib.rs`, `calls/mod.rs`), each with its source; `label` prefixes the
    /// paths in reports.
    fn from_sources<'a>(label: &str, sources: impl IntoIterator<Item = (&'a str, String)>) -> Self {
        let mut modules = BTreeMap::new();
        let mut files = BTreeMap::new();
        let mut test_only = BTreeSet::new();
        for (rel, source) in sources {
            let mut parts: Vec<&str> = rel.trim_end_matches(".rs").split('/').collect();
            if parts == ["main"] {
                continue; // the binary is a crate of its own that imports the library
            }
            if matches!(parts.last(), Some(&"mod") | Some(&"lib")) {
                parts.pop();
            }
            let module = parts.join("::");
            let lexed = lex(&source);
            for child in test_only_children(&lexed) {
                test_only.insert(join(&module, &child));
            }
            modules.insert(module.clone(), without_test_items(&lexed));
            files.insert(module, format!("{label}{rel}"));
        }
        // A test-only module and everything under it are tests.
        modules.retain(|module, _| !test_only.iter().any(|t| within(module, t)));
        files.retain(|module, _| modules.contains_key(module));
        Self { modules, files }
    }

    /// The crate whose source root is `workspace/src_dir`.
    fn load(workspace: &Path, src_dir: &str) -> Self {
        let root = workspace.join(src_dir);
        let mut sources = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read source dir") {
                let path = entry.expect("dir entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let rel = path.strip_prefix(&root).expect("under the source root");
                    let rel = rel.to_string_lossy().replace('\\', "/");
                    sources.push((rel, std::fs::read_to_string(&path).expect("read source")));
                }
            }
        }
        Self::from_sources(
            &format!("{src_dir}/"),
            sources.iter().map(|(rel, src)| (rel.as_str(), src.clone())),
        )
    }

    fn is_module(&self, module: &str) -> bool {
        self.modules.contains_key(module)
    }
}

/// One name a `use` brings into scope.
struct Binding {
    /// The path as written (`super::sim::SimAsr`, `crate::store`).
    path: String,
    /// The name bound (the alias after `as`, `*` for a glob).
    name: String,
    /// Whether the `use` is `pub` (of any reach): a re-export.
    public: bool,
}

/// Expands one `use` tree (`a::{b, c::d as e, f::*, self}`) into paths and the names they bind.
fn expand_use(prefix: &str, tree: &str, out: &mut Vec<(String, String)>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let base = join(prefix, head);
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
        return;
    }
    let (item, alias) = match tree.split_once(" as ") {
        Some((item, alias)) => (item.trim(), Some(alias.trim())),
        None => (tree, None),
    };
    if item.is_empty() {
        return;
    }
    let path = if item == "self" {
        prefix.to_string()
    } else {
        join(prefix, item)
    };
    let name = alias
        .unwrap_or_else(|| path.rsplit("::").next().unwrap_or(""))
        .to_string();
    out.push((path, name));
}

/// A module's `use` declarations, and its code with them taken out.
fn split_uses(code: &str) -> (Vec<Binding>, String) {
    let mut bindings = Vec::new();
    let mut rest_code = String::with_capacity(code.len());
    let mut from = 0;
    let mut search = 0;
    while let Some(found) = code[search..].find("use") {
        let at = search + found;
        search = at + 3;
        let before = code[..at].chars().last();
        let after = code[at + 3..].chars().next();
        if before.is_some_and(is_ident) || !after.is_some_and(char::is_whitespace) {
            continue;
        }
        let Some(end) = code[at..].find(';').map(|e| at + e) else {
            break;
        };
        // A visibility before `use` makes it a re-export: `pub`, `pub(crate)`, ….
        let head = code[from..at].trim_end();
        let mut start = from + head.len();
        let mut public = false;
        if head.ends_with("pub") && !head[..head.len() - 3].ends_with(is_ident) {
            public = true;
            start -= 3;
        } else if head.ends_with(')')
            && let Some(open) = head.rfind("pub(")
            && !head[open + 4..].contains('(')
        {
            public = true;
            start = from + open;
        }
        let tree: String = code[at + 3..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let mut expanded = Vec::new();
        expand_use("", &tree, &mut expanded);
        bindings.extend(
            expanded
                .into_iter()
                .map(|(path, name)| Binding { path, name, public }),
        );
        rest_code.push_str(&code[from..start]);
        rest_code.push('\n');
        from = end + 1;
        search = from;
    }
    rest_code.push_str(&code[from..]);
    (bindings, rest_code)
}

/// Every path in code that starts with an identifier and goes on with `::`.
fn code_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let chars: Vec<(usize, char)> = code.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        let prev = i.checked_sub(1).map(|p| chars[p].1);
        if !is_ident(c) || prev.is_some_and(|p| is_ident(p) || p == ':' || p == '#') {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && (is_ident(chars[j].1) || chars[j].1 == ':') {
            j += 1;
        }
        let end = chars.get(j).map_or(code.len(), |&(e, _)| e);
        let path = code[at..end].trim_end_matches(':');
        if path.contains("::") {
            paths.push(path.to_string());
        }
        i = j;
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

/// Where the crate's names come from: (module, bound name) → absolute path of what it binds.
type Bindings = BTreeMap<(ModPath, String), String>;

/// The absolute path `written` names in `module`, when it is a path into this
/// crate: from `crate`/`super`/`self`, a child module, or a name `module` bound
/// with `use`. Other paths (other crates, `std`, local enums) give `None`.
fn resolve_written(
    krate: &Crate,
    bindings: &Bindings,
    module: &str,
    written: &str,
) -> Option<String> {
    let (first, rest) = written.split_once("::").unwrap_or((written, ""));
    match first {
        "crate" | "super" | "self" => Some(absolute(module, written)),
        _ if krate.is_module(&join(module, first)) => Some(join(module, written)),
        _ => bindings
            .get(&(module.to_string(), first.to_string()))
            .map(|source| join(source, rest)),
    }
}

/// The module that defines what the absolute `path` names, following `use` bindings.
fn defining_module(krate: &Crate, bindings: &Bindings, path: &str, hops: usize) -> String {
    let segments: Vec<&str> = path
        .split("::")
        .filter(|s| !s.is_empty() && *s != "*")
        .collect();
    let mut module = String::new();
    let mut used = 0;
    for segment in &segments {
        let candidate = join(&module, segment);
        if !krate.is_module(&candidate) {
            break;
        }
        module = candidate;
        used += 1;
    }
    if hops < 16
        && let Some(name) = segments.get(used)
        && let Some(source) = bindings.get(&(module.clone(), (*name).to_string()))
    {
        let rest = segments[used + 1..].join("::");
        return defining_module(krate, bindings, &join(source, &rest), hops + 1);
    }
    module
}

/// Whether `word` occurs in `code` as a whole identifier.
fn mentions(code: &str, word: &str) -> bool {
    code.match_indices(word).any(|(at, _)| {
        !code[..at].ends_with(is_ident) && !code[at + word.len()..].starts_with(is_ident)
    })
}

/// The crate's module graph.
fn edges(krate: &Crate) -> Graph {
    let mut uses = BTreeMap::new();
    let mut bindings = Bindings::new();
    for (module, code) in &krate.modules {
        let (declared, rest) = split_uses(code);
        for binding in &declared {
            if binding.name != "*"
                && let Some(source) =
                    resolve_written(krate, &Bindings::new(), module, &binding.path)
            {
                bindings.insert((module.clone(), binding.name.clone()), source);
            }
        }
        uses.insert(module.clone(), (declared, rest));
    }
    let mut graph = Graph::new();
    let mut add = |from: &str, to: String, name: &str| {
        if to != from {
            graph
                .entry(from.to_string())
                .or_default()
                .entry(to)
                .or_default()
                .insert(name.to_string());
        }
    };
    for (module, (declared, rest)) in &uses {
        for binding in declared {
            let Some(full) = resolve_written(krate, &bindings, module, &binding.path) else {
                continue;
            };
            if krate.is_module(&full) {
                continue; // a module brought into scope: its uses are paths in code
            }
            let target = defining_module(krate, &bindings, &full, 0);
            // A re-export of the module's own descendants that it does not use
            // itself is wiring; its users' paths are followed to the child.
            let used = binding.name != "*" && mentions(rest, &binding.name);
            if binding.public && within(&target, module) && !used {
                continue;
            }
            let name = full.rsplit("::").next().unwrap_or("");
            add(module, target, name);
        }
        for path in code_paths(rest) {
            let Some(full) = resolve_written(krate, &bindings, module, &path) else {
                continue;
            };
            let target = defining_module(krate, &bindings, &full, 0);
            add(module, target, &path);
        }
    }
    graph
}

/// Strongly connected components of more than one node (Tarjan).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a Graph,
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
    walk.found.sort();
    walk.found
}

/// Each cycle of `graph`, with the edges inside it, as report lines.
fn describe(
    what: &str,
    graph: &Graph,
    name_of: impl Fn(&str) -> String,
    components: Vec<Vec<String>>,
) -> Vec<String> {
    components
        .into_iter()
        .map(|component| {
            let members: BTreeSet<&String> = component.iter().collect();
            let mut lines = vec![format!("cycle among {} {what}:", component.len())];
            for from in &component {
                for (to, names) in graph.get(from).into_iter().flatten() {
                    if members.contains(to) {
                        let names: Vec<&str> = names.iter().map(String::as_str).collect();
                        lines.push(format!(
                            "  {} -> {}: {}",
                            name_of(from),
                            name_of(to),
                            names.join(", ")
                        ));
                    }
                }
            }
            lines.join("\n")
        })
        .collect()
}

/// The deepest module that holds every one of `modules` (a module holds itself).
fn common_ancestor(modules: &[String]) -> String {
    let mut common: Vec<&str> = modules
        .first()
        .map_or(Vec::new(), |m| m.split("::").collect());
    for module in modules {
        let shared = common
            .iter()
            .zip(module.split("::"))
            .take_while(|(a, b)| **a == *b)
            .count();
        common.truncate(shared);
    }
    common.join("::")
}

/// The graph's edges among `members` only.
fn among(graph: &Graph, members: &BTreeSet<&str>) -> Graph {
    graph
        .iter()
        .filter(|(from, _)| members.contains(from.as_str()))
        .map(|(from, targets)| {
            let inside = targets
                .iter()
                .filter(|(to, _)| members.contains(to.as_str()))
                .map(|(to, names)| (to.clone(), names.clone()))
                .collect();
            (from.clone(), inside)
        })
        .collect()
}

/// The cycles the rule forbids among `members`. A strongly connected group
/// made of one folder's own file (`mod.rs`, or `foo.rs` beside `foo/`) and
/// files under that folder is the folder at work: its file both holds the
/// types its children share and wires them, so they reach each other both
/// ways. That file is set aside and the rest of the group is checked again,
/// so a cycle among the children, or one that leaves a sub-folder, still
/// fails. Any other group is a cycle: it crosses out of every folder whose
/// file it holds, as `tools.rs` → `providers/mod.rs` → `providers/sim.rs` →
/// `providers/sim_tools.rs` → `tools.rs` once did.
fn forbidden_cycles(graph: &Graph, members: &BTreeSet<&str>) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for component in cycles(&among(graph, members)) {
        let folder = common_ancestor(&component);
        if component.contains(&folder) {
            let rest: BTreeSet<&str> = component
                .iter()
                .map(String::as_str)
                .filter(|m| *m != folder)
                .collect();
            found.extend(forbidden_cycles(graph, &rest));
        } else {
            found.push(component);
        }
    }
    found
}

/// The cycles between a crate's modules (files), one report per cycle.
fn module_cycles(krate: &Crate) -> Vec<String> {
    let graph = edges(krate);
    let all: BTreeSet<&str> = krate.modules.keys().map(String::as_str).collect();
    let found = forbidden_cycles(&graph, &all);
    let name_of = |module: &str| krate.files[module].clone();
    describe("modules", &graph, name_of, found)
}

/// The crate's room graph: an edge for every module edge that leaves its
/// room, labelled with the files and names behind it.
fn room_edges(krate: &Crate) -> Graph {
    let mut rooms = Graph::new();
    for (from, targets) in edges(krate) {
        for (to, names) in targets {
            let (from_room, to_room) = (room_of(&from), room_of(&to));
            if from_room != to_room {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                rooms
                    .entry(from_room.to_string())
                    .or_default()
                    .entry(to_room.to_string())
                    .or_default()
                    .insert(format!(
                        "{} -> {} ({})",
                        krate.files[&from],
                        krate.files[&to],
                        names.join(", ")
                    ));
            }
        }
    }
    rooms
}

/// The cycles between a crate's rooms once the `allowed` room edges are taken
/// out, plus a line for each allowed edge that no longer exists or no longer
/// lies on a cycle (so the allowance can only shrink).
fn room_cycles(krate: &Crate, allowed: &[(&str, &str)]) -> Vec<String> {
    let mut rooms = room_edges(krate);
    let group_of: BTreeMap<String, usize> = cycles(&rooms)
        .into_iter()
        .enumerate()
        .flat_map(|(group, members)| members.into_iter().map(move |room| (room, group)))
        .collect();
    let mut report = Vec::new();
    for &(from, to) in allowed {
        let exists = rooms
            .get_mut(from)
            .and_then(|targets| targets.remove(to))
            .is_some();
        if !exists {
            report.push(format!(
                "the known room edge {from} -> {to} no longer exists: delete it from the list"
            ));
        } else if group_of
            .get(from)
            .is_none_or(|group| group_of.get(to) != Some(group))
        {
            report.push(format!(
                "the known room edge {from} -> {to} no longer closes a cycle: delete it from the list"
            ));
        }
    }
    let found = cycles(&rooms);
    report.extend(describe("rooms", &rooms, str::to_string, found));
    report
}

/// The edges from the crate's other rooms into `room`, one line each (empty
/// when only `room` itself uses what it holds).
fn imports_of(krate: &Crate, room: &str) -> Vec<String> {
    room_edges(krate)
        .into_iter()
        .filter(|(from, _)| from != room)
        .filter_map(|(from, mut targets)| targets.remove(room).map(|why| (from, why)))
        .flat_map(|(from, why)| {
            why.into_iter()
                .map(move |edge| format!("{from} -> {room}: {edge}"))
        })
        .collect()
}

/// The workspace root, where the crates' sources are.
fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let mut report = Vec::new();
    for src in ["src", "actors/src", "media/src"] {
        report.extend(module_cycles(&Crate::load(workspace(), src)));
    }
    assert!(report.is_empty(), "import cycles:\n{}", report.join("\n"));
}

#[test]
fn media_and_actors_have_no_cycle_between_rooms() {
    let mut report = Vec::new();
    for src in ["actors/src", "media/src"] {
        report.extend(room_cycles(&Crate::load(workspace(), src), &[]));
    }
    assert!(report.is_empty(), "room cycles:\n{}", report.join("\n"));
}

#[test]
fn no_engine_room_imports_the_sim_room() {
    let actors = Crate::load(workspace(), "actors/src");
    let mut report = Vec::new();
    for room in ACTORS_IMPORT_ONLY_ROOMS {
        assert!(
            actors.is_module(room),
            "actors/src/{room} is gone: update ACTORS_IMPORT_ONLY_ROOMS"
        );
        report.extend(imports_of(&actors, room));
    }
    assert!(
        report.is_empty(),
        "the engine imports an import-only room:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_root_crate_rooms_cycle_only_through_the_known_app_tangle() {
    let report = room_cycles(&Crate::load(workspace(), "src"), KNOWN_SRC_ROOM_EDGES);
    assert!(report.is_empty(), "room cycles:\n{}", report.join("\n"));
}

/// A synthetic crate from `(path, source)` pairs.
fn synthetic(files: &[(&str, &str)]) -> Crate {
    Crate::from_sources(
        "",
        files
            .iter()
            .map(|&(path, source)| (path, source.to_string())),
    )
}

#[test]
fn the_checker_sees_a_cycle_through_use_groups_super_and_reexports() {
    let mut files = vec![
        ("lib.rs", "pub mod calls;\npub mod state;\n"),
        (
            "calls/mod.rs",
            "pub mod dispatch;\npub mod placement;\npub use placement::bypasses;\n",
        ),
        (
            "calls/dispatch.rs",
            "use crate::{state::State, calls::bypasses};\npub fn job_for() {}\n",
        ),
        (
            "calls/placement.rs",
            "// use crate::state::State; is a comment\n\
             pub fn bypasses() { let _ = \"crate::state::State\"; super::dispatch::job_for() }\n\
             #[cfg(test)]\nmod tests {\n    use crate::state::State;\n}\n",
        ),
        ("state.rs", "pub struct State;\n"),
    ];
    let report = module_cycles(&synthetic(&files));
    assert_eq!(report.len(), 1, "{report:?}");
    assert!(
        report[0].contains("calls/dispatch.rs") && report[0].contains("calls/placement.rs"),
        "{}",
        report[0]
    );
    assert!(!report[0].contains("state.rs"), "{}", report[0]);

    files[3].1 = "pub fn bypasses() {}\n";
    assert!(module_cycles(&synthetic(&files)).is_empty());
}

/// The shape of the cycle the older check missed in `actors/`: `tools.rs` →
/// `providers/mod.rs`, whose constructor uses the sim it re-exports →
/// `providers/sim.rs` → `providers/sim_tools.rs` → back to `tools.rs`.
const ACTORS_SHAPE: &[(&str, &str)] = &[
    ("lib.rs", "pub mod providers;\npub mod tools;\n"),
    (
        "tools.rs",
        "use crate::providers::ToolSpec;\n\
         pub const TRANSFER_TOOL: &str = \"transfer_call\";\n\
         impl ToolSpec { pub fn transfer_call() -> Self { todo!() } }\n",
    ),
    (
        "providers/mod.rs",
        "pub mod sim;\npub mod sim_tools;\n\
         pub use sim::{SimConfig, SimLlm};\n\
         pub struct ToolSpec { pub name: String }\n\
         pub struct Providers;\n\
         impl Providers { pub fn sim(config: SimConfig) -> SimLlm { SimLlm::new(config) } }\n",
    ),
    (
        "providers/sim.rs",
        "use super::sim_tools::{SimToolTurn, sim_tool_turn};\nuse super::ToolSpec;\n\
         pub struct SimConfig;\npub struct SimLlm;\n\
         impl SimLlm { pub fn new(_: SimConfig) -> Self { Self } }\n",
    ),
    (
        "providers/sim_tools.rs",
        "use super::ToolSpec;\nuse crate::tools::TRANSFER_TOOL;\n\
         pub enum SimToolTurn {}\npub fn sim_tool_turn(spec: &ToolSpec) -> bool { spec.name == TRANSFER_TOOL }\n",
    ),
];

#[test]
fn the_checker_sees_the_actors_cycle_through_a_parent_using_its_child() {
    let report = module_cycles(&synthetic(ACTORS_SHAPE));
    assert_eq!(report.len(), 1, "{report:?}");
    for file in [
        "tools.rs -> providers/mod.rs",
        "providers/mod.rs -> providers/sim.rs: SimConfig, SimLlm",
        "providers/sim.rs -> providers/sim_tools.rs",
        "providers/sim_tools.rs -> tools.rs: TRANSFER_TOOL",
    ] {
        assert!(
            report[0].contains(file),
            "{file} missing from\n{}",
            report[0]
        );
    }
    // Rooms `tools` and `providers` import each other as well.
    let rooms = room_cycles(&synthetic(ACTORS_SHAPE), &[]);
    assert_eq!(rooms.len(), 1, "{rooms:?}");
    assert!(rooms[0].contains("providers -> tools") && rooms[0].contains("tools -> providers"));

    // The fix made in `actors/`: the constructor moves next to the sim, so the
    // parent only re-exports it (wiring, not an edge), and the tool name moves
    // to the providers, so the arrows between the rooms point one way.
    let mut fixed = ACTORS_SHAPE.to_vec();
    fixed[1].1 = "pub use crate::providers::TRANSFER_TOOL;\nuse crate::providers::ToolSpec;\n\
                  impl ToolSpec { pub fn transfer_call() -> Self { todo!() } }\n";
    fixed[2].1 = "pub mod sim;\npub mod sim_tools;\n\
                  pub use sim::{SimConfig, SimLlm};\n\
                  pub struct ToolSpec { pub name: String }\n\
                  pub const TRANSFER_TOOL: &str = \"transfer_call\";\n\
                  pub struct Providers;\n";
    fixed[3].1 = "use super::sim_tools::{SimToolTurn, sim_tool_turn};\nuse super::{Providers, ToolSpec};\n\
                  pub struct SimConfig;\npub struct SimLlm;\n\
                  impl Providers { pub fn sim(config: SimConfig) -> SimLlm { SimLlm } }\n";
    fixed[4].1 = "use super::{ToolSpec, TRANSFER_TOOL};\n\
                  pub enum SimToolTurn {}\npub fn sim_tool_turn(spec: &ToolSpec) -> bool { spec.name == TRANSFER_TOOL }\n";
    let fixed = synthetic(&fixed);
    assert!(
        module_cycles(&fixed).is_empty(),
        "{:?}",
        module_cycles(&fixed)
    );
    assert!(
        room_cycles(&fixed, &[]).is_empty(),
        "{:?}",
        room_cycles(&fixed, &[])
    );
}

/// The actors' shape today: the sims in a room of their own, `sim/`, which
/// imports `providers` (and through the names, nothing of `tools`), with
/// `Providers::sim` built beside them.
const SIM_ROOM_SHAPE: &[(&str, &str)] = &[
    (
        "lib.rs",
        "pub mod providers;\npub mod sim;\npub mod tools;\n",
    ),
    (
        "tools.rs",
        "pub use crate::providers::TRANSFER_TOOL;\nuse crate::providers::ToolSpec;\n\
         impl ToolSpec { pub fn transfer_call() -> Self { todo!() } }\n",
    ),
    (
        "providers/mod.rs",
        "pub struct ToolSpec { pub name: String }\n\
         pub const TRANSFER_TOOL: &str = \"transfer_call\";\n\
         pub struct Providers;\n",
    ),
    ("sim/mod.rs", "pub mod llm;\npub mod tool_use;\n"),
    (
        "sim/llm.rs",
        "use super::tool_use::sim_tool_turn;\nuse crate::providers::{Providers, ToolSpec};\n\
         pub struct SimConfig;\npub struct SimLlm;\n\
         impl Providers { pub fn sim(config: SimConfig) -> SimLlm { SimLlm } }\n",
    ),
    (
        "sim/tool_use.rs",
        "use crate::providers::{ToolSpec, TRANSFER_TOOL};\n\
         pub fn sim_tool_turn(spec: &ToolSpec) -> bool { spec.name == TRANSFER_TOOL }\n",
    ),
];

#[test]
fn the_checker_holds_the_sim_room_import_only_and_the_tools_cycle_gone() {
    let today = synthetic(SIM_ROOM_SHAPE);
    assert!(
        module_cycles(&today).is_empty(),
        "{:?}",
        module_cycles(&today)
    );
    assert!(
        room_cycles(&today, &[]).is_empty(),
        "{:?}",
        room_cycles(&today, &[])
    );
    assert!(
        imports_of(&today, "sim").is_empty(),
        "{:?}",
        imports_of(&today, "sim")
    );

    // `Providers::sim` moved back into `providers/mod.rs`: an engine room imports
    // the sim room, and the two rooms import each other.
    let mut back = SIM_ROOM_SHAPE.to_vec();
    back[2].1 = "use crate::sim::llm::{SimConfig, SimLlm};\n\
                 pub struct ToolSpec { pub name: String }\n\
                 pub const TRANSFER_TOOL: &str = \"transfer_call\";\n\
                 pub struct Providers;\n\
                 impl Providers { pub fn sim(config: SimConfig) -> SimLlm { SimLlm } }\n";
    back[4].1 = "use super::tool_use::sim_tool_turn;\nuse crate::providers::ToolSpec;\n\
                 pub struct SimConfig;\npub struct SimLlm;\n";
    let back = synthetic(&back);
    let imports = imports_of(&back, "sim");
    assert_eq!(imports.len(), 1, "{imports:?}");
    assert!(
        imports[0].starts_with("providers -> sim: providers/mod.rs -> sim/llm.rs"),
        "{}",
        imports[0]
    );
    let rooms = room_cycles(&back, &[]);
    assert_eq!(rooms.len(), 1, "{rooms:?}");
    assert!(rooms[0].contains("providers -> sim") && rooms[0].contains("sim -> providers"));

    // The tool names moved back into `tools.rs`, read by the sim from there while
    // `tools` takes `ToolSpec` from `providers`: no cycle (the arrows still point
    // one way), and the sim room is still imported by no one.
    let mut names_in_tools = SIM_ROOM_SHAPE.to_vec();
    names_in_tools[1].1 = "use crate::providers::ToolSpec;\n\
                           pub const TRANSFER_TOOL: &str = \"transfer_call\";\n\
                           impl ToolSpec { pub fn transfer_call() -> Self { todo!() } }\n";
    names_in_tools[2].1 = "pub struct ToolSpec { pub name: String }\npub struct Providers;\n";
    names_in_tools[5].1 = "use crate::providers::ToolSpec;\nuse crate::tools::TRANSFER_TOOL;\n\
                           pub fn sim_tool_turn(spec: &ToolSpec) -> bool { spec.name == TRANSFER_TOOL }\n";
    let names_in_tools = synthetic(&names_in_tools);
    assert!(module_cycles(&names_in_tools).is_empty());
    assert!(room_cycles(&names_in_tools, &[]).is_empty());
    assert!(imports_of(&names_in_tools, "sim").is_empty());
}

#[test]
fn the_checker_sees_a_cycle_between_rooms_that_no_two_files_close() {
    // a/x.rs → b/y.rs → a/z.rs: no file cycle, but rooms `a` and `b` import each other.
    let files = [
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        ("a/mod.rs", "pub mod x;\npub mod z;\n"),
        ("a/x.rs", "use crate::b::y::Y;\npub fn x(_: Y) {}\n"),
        ("a/z.rs", "pub struct Z;\n"),
        ("b/mod.rs", "pub mod y;\n"),
        ("b/y.rs", "pub struct Y(pub crate::a::z::Z);\n"),
    ];
    let krate = synthetic(&files);
    assert!(
        module_cycles(&krate).is_empty(),
        "{:?}",
        module_cycles(&krate)
    );
    let report = room_cycles(&krate, &[]);
    assert_eq!(report.len(), 1, "{report:?}");
    assert!(
        report[0].starts_with("cycle among 2 rooms"),
        "{}",
        report[0]
    );
    assert!(
        report[0].contains("a -> b: a/x.rs -> b/y.rs (Y)")
            && report[0].contains("b -> a: b/y.rs -> a/z.rs (crate::a::z::Z)"),
        "{}",
        report[0]
    );

    // The ratchet: a listed edge explains the cycle; a listed edge that no
    // longer exists, or no longer closes a cycle, fails until it is deleted.
    assert!(room_cycles(&krate, &[("b", "a")]).is_empty());
    let stale = room_cycles(&krate, &[("b", "a"), ("a", "c")]);
    assert_eq!(
        stale,
        ["the known room edge a -> c no longer exists: delete it from the list"]
    );
    let mut files = files.to_vec();
    files[5].1 = "pub struct Y;\n";
    let stale = room_cycles(&synthetic(&files), &[("a", "b")]);
    assert_eq!(
        stale,
        ["the known room edge a -> b no longer closes a cycle: delete it from the list"]
    );
}

#[test]
fn a_folder_file_and_its_children_may_use_each_other_but_not_close_a_cycle_through_a_sub_folder() {
    // `f/mod.rs` holds `Shared` for its children and wires them: allowed.
    let mut files = vec![
        ("lib.rs", "pub mod f;\n"),
        (
            "f/mod.rs",
            "pub mod a;\npub mod b;\npub mod sub;\npub struct Shared;\n\
             pub fn wire() { a::run(); b::y(); }\n",
        ),
        ("f/a.rs", "use super::Shared;\npub fn run() {}\n"),
        ("f/b.rs", "use super::Shared;\npub fn y() {}\n"),
        ("f/sub/mod.rs", "pub mod deep;\npub fn go() { deep::x() }\n"),
        ("f/sub/deep.rs", "pub fn x() {}\n"),
    ];
    let krate = synthetic(&files);
    assert!(
        module_cycles(&krate).is_empty(),
        "{:?}",
        module_cycles(&krate)
    );

    // `b.rs` → `sub/mod.rs` → `sub/deep.rs` → `b.rs` leaves the folder `sub`:
    // found once `f/mod.rs` is set aside.
    files[3].1 = "use super::Shared;\npub fn y() { super::sub::go() }\n";
    files[5].1 = "pub fn x() { crate::f::b::y() }\n";
    let report = module_cycles(&synthetic(&files));
    assert_eq!(report.len(), 1, "{report:?}");
    assert!(
        report[0].starts_with("cycle among 3 modules"),
        "{}",
        report[0]
    );
    assert!(
        report[0].contains("f/sub/mod.rs -> f/sub/deep.rs: deep::x")
            && !report[0].contains("f/mod.rs ->"),
        "{}",
        report[0]
    );
}

/// Where `AppState` is at home: `app/` builds it and `http/state.rs` defines
/// it, so their signatures may name it freely.
const APP_STATE_HOMES: &[&str] = &["src/app/", "src/http/state.rs"];

/// Signatures that may still name `AppState` (issue 30 point 1): a file or
/// folder under `src/`, and a function name there (`*` for all of them).
/// Everything else takes the parts it uses (`State<Store>`, `&CallService`).
/// The test fails when an entry no longer matches any signature, so delete
/// entries as they go, and never add one.
const APP_STATE_SIGNATURES_ALLOWED: &[(&str, &str)] = &[
    // The routers are built over the whole state, and `http::router` wires
    // the middleware and the carriers' callback host from it.
    ("src/http/", "router"),
    ("src/http/mod.rs", "api_routes"),
    ("src/http/recordings.rs", "public_router"),
    // The console's router and its pages' sub-routers, over the same state.
    ("src/console/mod.rs", "router"),
    ("src/console/", "routes"),
];

/// Whether `word` occurs in `text` as a whole identifier.
fn names(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// Every named function's signature in lexed code, as (name, signature):
/// from `fn` up to its body's `{` or its `;`, whitespace collapsed. Names
/// may be macro metavariables (`$name`); bare `fn(…)` types are not items.
fn signatures(code: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("fn") {
        let before = code[..at].chars().next_back();
        let rest = &code[at + 2..];
        if before.is_some_and(is_ident) || !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|&c| is_ident(c) || c == '$')
            .collect();
        if name.is_empty() {
            continue;
        }
        let mut depth = 0i32;
        let mut end = code.len();
        for (i, c) in code[at..].char_indices() {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                '{' | ';' if depth == 0 => {
                    end = at + i;
                    break;
                }
                _ => {}
            }
        }
        let signature = code[at..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        found.push((name, signature));
    }
    found
}

/// The signatures of `krate` that name `AppState`, as `file: signature`,
/// leaving out the files under `homes` and the `allowed` (file or folder,
/// function or `*`); plus a line for each allowed entry that matches none.
fn app_state_signatures(krate: &Crate, homes: &[&str], allowed: &[(&str, &str)]) -> Vec<String> {
    let mut report = Vec::new();
    let mut used = BTreeSet::new();
    for (module, code) in &krate.modules {
        let file = &krate.files[module];
        if homes.iter().any(|home| file.starts_with(home)) {
            continue;
        }
        for (name, signature) in signatures(code) {
            if !names(&signature, "AppState") {
                continue;
            }
            let allowance = allowed
                .iter()
                .position(|&(place, f)| file.starts_with(place) && (f == "*" || f == name));
            match allowance {
                Some(entry) => {
                    used.insert(entry);
                }
                None => report.push(format!("{file}: {signature}")),
            }
        }
    }
    for (entry, (place, name)) in allowed.iter().enumerate() {
        if !used.contains(&entry) {
            report.push(format!(
                "the allowed signature {place} {name} no longer names AppState: delete it from the list"
            ));
        }
    }
    report
}

#[test]
fn no_handler_or_service_signature_names_app_state() {
    let report = app_state_signatures(
        &Crate::load(workspace(), "src"),
        APP_STATE_HOMES,
        APP_STATE_SIGNATURES_ALLOWED,
    );
    assert!(
        report.is_empty(),
        "signatures naming AppState (take the parts instead: State<Store>, &CallService, …):\n{}",
        report.join("\n")
    );
}

#[test]
fn the_app_state_scanner_sees_handlers_helpers_and_macro_handlers() {
    let source = "use crate::http::state::AppState;\n\
        pub fn router() -> Router<AppState> { Router::new() }\n\
        async fn handler(\n    State(state): State<AppState>,\n    caller: Caller,\n) -> Json<()> {\n\
            let _ = \"AppState\";\n    Json(())\n}\n\
        pub async fn helper(state: &AppState, id: &str) -> ApiResult<()> { Ok(()) }\n\
        // fn commented(state: &AppState) {}\n\
        fn parts(store: &Store, f: fn(u8) -> u8) -> MyAppStateLike { todo!() }\n\
        macro_rules! route { ($name:ident) => {\n\
            async fn $name(axum::extract::State(s): axum::extract::State<$crate::http::state::AppState>) {}\n\
        } }\n\
        #[cfg(test)]\nmod tests {\n    fn t(state: &AppState) {}\n}\n";
    let krate = synthetic(&[
        ("lib.rs", "pub mod app;\npub mod http;\n"),
        ("http/mod.rs", "pub mod calls;\n"),
        ("http/calls.rs", source),
        ("app/server.rs", "fn build(state: AppState) {}\n"),
    ]);
    let report = app_state_signatures(&krate, &["app/"], &[]);
    assert_eq!(
        report,
        [
            "http/calls.rs: fn router() -> Router<AppState>",
            "http/calls.rs: fn handler( State(state): State<AppState>, caller: Caller, ) -> Json<()>",
            "http/calls.rs: fn helper(state: &AppState, id: &str) -> ApiResult<()>",
            "http/calls.rs: fn $name(axum::extract::State(s): axum::extract::State<$crate::http::state::AppState>)",
        ]
    );

    // Allowed entries take their signatures out; one that matches nothing is stale.
    let report = app_state_signatures(
        &krate,
        &["app/"],
        &[
            ("http/", "router"),
            ("http/calls.rs", "*"),
            ("http/agents.rs", "*"),
        ],
    );
    assert_eq!(
        report,
        [
            "the allowed signature http/agents.rs * no longer names AppState: delete it from the list"
        ]
    );
}
