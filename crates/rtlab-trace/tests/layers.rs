//! The explainer's modules import one another in one direction only: no circle among them
//! (the event sources below, the history, replay and attribution above them, the reader on
//! top), and nothing in this crate names the watch engine built on it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module of `src` (a file, or a directory's files) and the modules of this
/// crate it names (`crate::name`), its tests left out.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    for path in files {
        let rel = path.strip_prefix(src).unwrap();
        let module = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if module == "lib" || rel.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // A file's unit tests sit at its end; comments (a doc's links) import nothing.
        let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let text: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let names = graph.entry(module.clone()).or_default();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                names.insert(name);
            }
        }
    }
    graph
}

#[test]
fn the_modules_import_one_another_in_one_direction_and_never_the_watch() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = imports(&src);
    assert!(graph.len() > 10, "modules found: {graph:?}");
    // A module reaching itself through what it imports is a circle.
    for start in graph.keys() {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&String> = graph[start].iter().collect();
        while let Some(m) = todo.pop() {
            assert!(m != start, "a circle through {start}: {graph:?}");
            if seen.insert(m.clone()) {
                todo.extend(graph.get(m).into_iter().flatten());
            }
        }
    }
    // Only modules are imported, never the crate root's own items (they live in modules).
    for (module, names) in &graph {
        for name in names {
            assert!(
                graph.contains_key(name),
                "{module} imports crate::{name}, which is no module of the crate"
            );
        }
    }
    for (module, _) in graph {
        let path = src.join(format!("{module}.rs"));
        let text = std::fs::read_to_string(&path)
            .or_else(|_| std::fs::read_to_string(src.join(&module).join("mod.rs")))
            .unwrap_or_default();
        assert!(
            !text.contains("rtlab_watch"),
            "{module} names the watch engine"
        );
    }
}
