//! What checking a value against a schema can cost, known before the check runs. The schema
//! crate applies a subschema once per path that reaches it: `$ref`s shared by several
//! branches (`anyOf` over the same definition, a chain of definitions each naming the next
//! twice) multiply those paths, so a schema of a few hundred bytes can make a check of `{}`
//! run for hours, and error reports that collect every branch's errors take memory to match.
//! Here the schema becomes a graph of its subschemas and how each applies to the value (to
//! the same node, to a named property, to any property or item), and the number of
//! subschema applications a value needs is counted before the check.
//!
//! Refused when compiling, whatever the value: references that loop without descending into
//! the value, that chain deeper than [`MAX_REF_DEPTH`], or that reach one subschema along more
//! than [`MAX_SAME_NODE_PATHS`] paths; a `$ref` this module cannot follow.

use std::collections::HashMap;

use serde_json::Value;

/// Longest chain of subschemas applying to one node of the value (through `$ref`, `allOf`,
/// `anyOf`, `oneOf`, `not`, `if`/`then`/`else`, dependent schemas). Bounds the checker's
/// recursion per level of the value.
pub(super) const MAX_REF_DEPTH: u32 = 32;

/// Most paths along which one subschema may apply to one node of the value.
pub(super) const MAX_SAME_NODE_PATHS: u64 = 10_000;

/// How a subschema applies to the value its parent applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// To the same node.
    Same,
    /// To the property of that name.
    Prop(String),
    /// To every property (or every property name).
    AnyProp,
    /// To the item at that index.
    Item(usize),
    /// To every item.
    AnyItem,
}

/// A compiled schema's subschemas and the steps between them.
#[derive(Debug)]
pub(super) struct Graph {
    edges: Vec<Vec<(Step, u32)>>,
    /// Subschema applications per node of the value when no path loops (at most this many
    /// for each node), saturating.
    acyclic_paths: Option<u64>,
}

impl Graph {
    /// The graph of `doc`, or why its references are refused.
    pub(super) fn build(doc: &Value) -> Result<Graph, String> {
        let mut b = Builder {
            doc,
            ids: HashMap::new(),
            pointers: Vec::new(),
            edges: Vec::new(),
            refs: Vec::new(),
            anchors: HashMap::new(),
            dynamic_anchors: HashMap::new(),
            recursive_anchors: Vec::new(),
            resources: HashMap::new(),
            resources_by_name: HashMap::new(),
        };
        b.node(String::new(), String::new(), doc);
        while let Some((from, base, kind, target)) = b.refs.pop() {
            for to in b.resolve(&base, kind, &target)? {
                b.edges[from as usize].push((Step::Same, to));
            }
        }
        let Builder {
            edges, pointers, ..
        } = b;
        let order = same_node_order(&edges, &pointers)?;
        let mut depth = vec![0u32; edges.len()];
        let mut paths = vec![0u64; edges.len()];
        for &n in order.iter().rev() {
            let n = n as usize;
            let mut d = 1;
            let mut p = 1u64;
            for (_, to) in edges[n].iter().filter(|(s, _)| *s == Step::Same) {
                d = d.max(depth[*to as usize] + 1);
                p = p.saturating_add(paths[*to as usize]);
            }
            depth[n] = d;
            paths[n] = p;
            if d > MAX_REF_DEPTH {
                return Err(format!(
                    "the subschemas applying to one value from `{}` chain more than \
                     {MAX_REF_DEPTH} deep (through $ref, allOf, anyOf, oneOf, not, if)",
                    show(&pointers[n])
                ));
            }
            if p > MAX_SAME_NODE_PATHS {
                return Err(format!(
                    "the references under `{}` apply its subschemas to one value along more \
                     than {MAX_SAME_NODE_PATHS} paths (a $ref named by several branches whose \
                     target names the next one several times multiplies them), so checking a \
                     value could take without bound",
                    show(&pointers[n])
                ));
            }
        }
        let acyclic_paths = acyclic_paths(&edges);
        Ok(Graph {
            edges,
            acyclic_paths,
        })
    }

    /// Whether checking `value` takes at most `base + per_node × (nodes of the value)`
    /// subschema applications.
    pub(super) fn within(&self, value: &Value, base: u64, per_node: u64) -> bool {
        if self.acyclic_paths.is_some_and(|paths| paths <= per_node) {
            return true;
        }
        let nodes = count_nodes(value);
        let budget = base.saturating_add(per_node.saturating_mul(nodes));
        // Without loops, each node of the value takes at most `paths` applications.
        if self
            .acyclic_paths
            .is_some_and(|paths| paths.saturating_mul(nodes) <= budget)
        {
            return true;
        }
        let mut walk = Walk {
            graph: self,
            left: budget,
        };
        walk.fits(0, value)
    }
}

/// Follows every path of subschema applications over one value, as the checker would, until
/// `left` runs out. Without a memo: a path costs this walk one step where it costs the checker
/// at least one subschema application, so the walk never costs more than the check it allows.
struct Walk<'g> {
    graph: &'g Graph,
    left: u64,
}

impl Walk<'_> {
    /// Whether applying `node` to `value`, and all it leads to, fits in what is left.
    fn fits(&mut self, node: u32, value: &Value) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        let graph = self.graph;
        graph.edges[node as usize].iter().all(|(step, to)| {
            let to = *to;
            match (step, value) {
                (Step::Same, _) => self.fits(to, value),
                (Step::Prop(name), Value::Object(m)) => {
                    m.get(name).is_none_or(|v| self.fits(to, v))
                }
                (Step::AnyProp, Value::Object(m)) => m.values().all(|v| self.fits(to, v)),
                (Step::Item(i), Value::Array(a)) => a.get(*i).is_none_or(|v| self.fits(to, v)),
                (Step::AnyItem, Value::Array(a)) => a.iter().all(|v| self.fits(to, v)),
                _ => true,
            }
        })
    }
}

/// Nodes of `value`: itself, its items, properties and theirs.
fn count_nodes(value: &Value) -> u64 {
    let mut count = 0u64;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        count += 1;
        match v {
            Value::Array(a) => stack.extend(a.iter()),
            Value::Object(m) => stack.extend(m.values()),
            _ => {}
        }
    }
    count
}

/// The nodes in an order where each comes before the nodes it applies to the same value
/// node, or the loop that prevents one.
fn same_node_order(edges: &[Vec<(Step, u32)>], pointers: &[String]) -> Result<Vec<u32>, String> {
    // 0: not seen, 1: on the path, 2: done.
    let mut state = vec![0u8; edges.len()];
    let mut order = Vec::with_capacity(edges.len());
    for start in 0..edges.len() {
        if state[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        state[start] = 1;
        while let Some((n, i)) = stack.last_mut() {
            let n = *n;
            let next = edges[n][*i..]
                .iter()
                .position(|(s, _)| *s == Step::Same)
                .map(|k| *i + k);
            match next {
                Some(k) => {
                    *i = k + 1;
                    let to = edges[n][k].1 as usize;
                    match state[to] {
                        0 => {
                            state[to] = 1;
                            stack.push((to, 0));
                        }
                        1 => {
                            return Err(format!(
                                "the references at `{}` lead back to it without descending \
                                 into the value, so checking a value would never end",
                                show(&pointers[to])
                            ));
                        }
                        _ => {}
                    }
                }
                None => {
                    state[n] = 2;
                    order.push(n as u32);
                    stack.pop();
                }
            }
        }
    }
    order.reverse();
    Ok(order)
}

/// Applications per value node of the subschemas reachable from the root, when no path of
/// any kind loops; `None` when one does.
fn acyclic_paths(edges: &[Vec<(Step, u32)>]) -> Option<u64> {
    let mut state = vec![0u8; edges.len()];
    let mut paths = vec![0u64; edges.len()];
    let mut stack: Vec<(usize, usize)> = vec![(0, 0)];
    state[0] = 1;
    while let Some((n, i)) = stack.last_mut() {
        let n = *n;
        if let Some((_, to)) = edges[n].get(*i) {
            *i += 1;
            let to = *to as usize;
            match state[to] {
                0 => {
                    state[to] = 1;
                    stack.push((to, 0));
                }
                1 => return None,
                _ => {}
            }
        } else {
            paths[n] = edges[n]
                .iter()
                .fold(1u64, |a, (_, to)| a.saturating_add(paths[*to as usize]));
            state[n] = 2;
            stack.pop();
        }
    }
    Some(paths[0])
}

fn show(pointer: &str) -> &str {
    if pointer.is_empty() { "#" } else { pointer }
}

/// A pending reference: the node it is in, that node's resource, its keyword, its target.
type PendingRef = (u32, String, &'static str, String);

struct Builder<'s> {
    doc: &'s Value,
    /// Node by its JSON pointer from the document's root.
    ids: HashMap<String, u32>,
    pointers: Vec<String>,
    edges: Vec<Vec<(Step, u32)>>,
    refs: Vec<PendingRef>,
    anchors: HashMap<String, Vec<u32>>,
    dynamic_anchors: HashMap<String, Vec<u32>>,
    recursive_anchors: Vec<u32>,
    /// The pointer of each `$id`'s resource, by the `$id` as written.
    resources: HashMap<String, String>,
    /// The same, by the last segment of the `$id`'s path (a reference may name a resource
    /// relative to another base).
    resources_by_name: HashMap<String, String>,
}

impl<'s> Builder<'s> {
    /// The node of the subschema `schema` at `pointer`, in the resource at `base`.
    fn node(&mut self, pointer: String, base: String, schema: &'s Value) -> u32 {
        if let Some(&id) = self.ids.get(&pointer) {
            return id;
        }
        let id = self.edges.len() as u32;
        self.edges.push(Vec::new());
        self.pointers.push(pointer.clone());
        self.ids.insert(pointer.clone(), id);
        let Value::Object(m) = schema else {
            return id;
        };
        let base = match m.get("$id") {
            // `"$id": "#name"` (drafts 6 and 7) is an anchor, not a resource.
            Some(Value::String(uri)) if uri.starts_with('#') => {
                let name = uri[1..].to_owned();
                self.anchors.entry(name).or_default().push(id);
                base
            }
            Some(Value::String(uri)) => {
                self.resources.insert(uri.clone(), pointer.clone());
                self.resources_by_name
                    .insert(last_segment(uri).to_owned(), pointer.clone());
                pointer.clone()
            }
            _ => base,
        };
        for (k, v) in m {
            let at = |rest: &str| format!("{pointer}/{}", escape(k)) + rest;
            match k.as_str() {
                "properties" | "patternProperties" | "$defs" | "definitions"
                | "dependentSchemas" | "dependencies" => {
                    let Value::Object(sub) = v else { continue };
                    for (name, s) in sub {
                        if !(s.is_object() || s.is_boolean()) {
                            continue;
                        }
                        let child = self.node(at(&format!("/{}", escape(name))), base.clone(), s);
                        let step = match k.as_str() {
                            "properties" => Step::Prop(name.clone()),
                            "patternProperties" => Step::AnyProp,
                            "dependentSchemas" | "dependencies" => Step::Same,
                            _ => continue,
                        };
                        self.edges[id as usize].push((step, child));
                    }
                }
                "additionalProperties" | "unevaluatedProperties" | "propertyNames" => {
                    let child = self.node(at(""), base.clone(), v);
                    self.edges[id as usize].push((Step::AnyProp, child));
                }
                "additionalItems" | "unevaluatedItems" | "contains" => {
                    let child = self.node(at(""), base.clone(), v);
                    self.edges[id as usize].push((Step::AnyItem, child));
                }
                "items" | "prefixItems" | "allOf" | "anyOf" | "oneOf" => {
                    let Value::Array(list) = v else {
                        let child = self.node(at(""), base.clone(), v);
                        self.edges[id as usize].push((Step::AnyItem, child));
                        continue;
                    };
                    for (i, s) in list.iter().enumerate() {
                        let child = self.node(at(&format!("/{i}")), base.clone(), s);
                        let step = match k.as_str() {
                            "items" | "prefixItems" => Step::Item(i),
                            _ => Step::Same,
                        };
                        self.edges[id as usize].push((step, child));
                    }
                }
                "not" | "if" | "then" | "else" => {
                    let child = self.node(at(""), base.clone(), v);
                    self.edges[id as usize].push((Step::Same, child));
                }
                "$ref" | "$dynamicRef" | "$recursiveRef" => {
                    if let Value::String(target) = v {
                        let kind = match k.as_str() {
                            "$ref" => "$ref",
                            "$dynamicRef" => "$dynamicRef",
                            _ => "$recursiveRef",
                        };
                        self.refs.push((id, base.clone(), kind, target.clone()));
                    }
                }
                "$anchor" | "$dynamicAnchor" => {
                    if let Value::String(name) = v {
                        self.anchors.entry(name.clone()).or_default().push(id);
                        if k == "$dynamicAnchor" {
                            self.dynamic_anchors
                                .entry(name.clone())
                                .or_default()
                                .push(id);
                        }
                    }
                }
                "$recursiveAnchor" if v == &Value::Bool(true) => self.recursive_anchors.push(id),
                _ => {}
            }
        }
        id
    }

    /// The nodes a reference of `kind` to `target` from the resource at `base` may apply.
    fn resolve(&mut self, base: &str, kind: &str, target: &str) -> Result<Vec<u32>, String> {
        let cannot = |why: &str| {
            format!(
                "weft cannot follow the {kind} `{target}` ({why}); it follows `#` pointers, \
                 anchors and the `$id`s of the schema itself"
            )
        };
        let (uri, fragment) = target.split_once('#').unwrap_or((target, ""));
        let resource = if uri.is_empty() {
            base.to_owned()
        } else {
            let found = self.resources.get(uri).or_else(|| {
                self.resources_by_name
                    .get(last_segment(uri.trim_end_matches('#')))
            });
            found
                .cloned()
                .ok_or_else(|| cannot("no `$id` of this schema names it"))?
        };
        let mut nodes = Vec::new();
        if fragment.starts_with('/') {
            let inner = percent_decode(fragment);
            // Within the resource; failing that, from the document's root.
            let (pointer, resource, schema) = match self.doc.pointer(&format!("{resource}{inner}"))
            {
                Some(schema) => (format!("{resource}{inner}"), resource, schema),
                None => {
                    let schema = self
                        .doc
                        .pointer(&inner)
                        .ok_or_else(|| cannot("nothing is at that pointer"))?;
                    (inner, String::new(), schema)
                }
            };
            nodes.push(self.node(pointer, resource, schema));
        } else if fragment.is_empty() {
            let schema = self
                .doc
                .pointer(&resource)
                .ok_or_else(|| cannot("nothing is at that pointer"))?;
            nodes.push(self.node(resource.clone(), resource, schema));
        } else {
            let name = percent_decode(fragment);
            nodes.extend(self.anchors.get(&name).into_iter().flatten());
            if kind == "$dynamicRef" {
                nodes.extend(self.dynamic_anchors.get(&name).into_iter().flatten());
            }
            if nodes.is_empty() {
                return Err(cannot("no anchor of this schema has that name"));
            }
        }
        if kind == "$recursiveRef" {
            nodes.push(0);
            nodes.extend(self.recursive_anchors.iter().copied());
        }
        nodes.sort_unstable();
        nodes.dedup();
        Ok(nodes)
    }
}

fn last_segment(uri: &str) -> &str {
    let path = uri.split('#').next().unwrap_or(uri);
    path.rsplit('/').next().unwrap_or(path)
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// `%XX` sequences decoded, as a URI fragment holds a JSON pointer.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
