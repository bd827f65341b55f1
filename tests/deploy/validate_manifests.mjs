// Validates Kubernetes manifests offline, as an API server with strict field validation would:
// each object against the OpenAPI schema of its apiVersion/kind (kubernetes-models for the
// built-in kinds, @kubernetes-models/prometheus-operator for monitoring.coreos.com), and no field
// that the schema does not know (a typo such as `readinessprobe` is an error, not a silent no-op).
//
//   node validate_manifests.mjs [--dump-json OUT.json] [--parse-only] FILE.yaml...
//
// Prints one line per problem ("FILE: Kind/name: spec.x.y: message") and exits 1 if there is
// any, else prints "validated N objects: Kind/name ..." and exits 0. --dump-json writes every
// object, in order, as one JSON array (the C++ tests cross-check that form); --parse-only skips
// the schemas (only YAML errors count), which is what those cross-checks need.
import { readFileSync, writeFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

// apiVersion -> the module whose exports are that group-version's model classes, by kind.
function modelModule(apiVersion) {
  if (apiVersion === "monitoring.coreos.com/v1") {
    return "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
  }
  if (!/^([a-z0-9.-]+\/)?v[0-9]+((alpha|beta)[0-9]+)?$/.test(apiVersion)) return null;
  return `kubernetes-models/${apiVersion}`;
}

async function modelClass(apiVersion, kind) {
  const name = modelModule(String(apiVersion));
  if (!name) return null;
  try {
    const mod = await import(name);
    const Model = mod[kind];
    return typeof Model === "function" && Model.apiVersion === apiVersion ? Model : null;
  } catch {
    return null;
  }
}

function pathText(path) {
  return path.map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? p : `.${p}`)).join("");
}

// Wraps `value` so that every property the schema's validator reads is recorded. A field of an
// object that the validator never read is one its schema does not define. Enumerating an
// object's keys (what a map type, e.g. labels, does) counts as reading all of them.
function track(value, path, seen) {
  if (value === null || typeof value !== "object") return value;
  const read = new Set();
  seen.push({ path, value, read });
  const children = new Map();
  return new Proxy(value, {
    get(target, prop) {
      const v = Reflect.get(target, prop);
      if (typeof prop !== "string" || !Object.prototype.hasOwnProperty.call(target, prop)) return v;
      read.add(prop);
      if (!children.has(prop)) {
        const index = Array.isArray(target) ? Number(prop) : prop;
        children.set(prop, track(v, [...path, index], seen));
      }
      return children.get(prop);
    },
    ownKeys(target) {
      for (const k of Reflect.ownKeys(target)) if (typeof k === "string") read.add(k);
      return Reflect.ownKeys(target);
    },
    getOwnPropertyDescriptor(target, prop) {
      if (typeof prop === "string") read.add(prop);
      return Reflect.getOwnPropertyDescriptor(target, prop);
    },
    has(target, prop) {
      if (typeof prop === "string") read.add(prop);
      return Reflect.has(target, prop);
    },
  });
}

async function validateObject(obj) {
  const problems = [];
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
    return ["the document is not a mapping"];
  }
  const Model = await modelClass(obj.apiVersion, obj.kind);
  if (!Model) return [`no schema for apiVersion ${obj.apiVersion} kind ${obj.kind}`];
  const seen = [];
  const proxy = track(obj, [], seen);
  try {
    Model.prototype.validate.call(proxy);
  } catch (err) {
    for (const e of err.errors ?? [{ instancePath: "", message: err.message }]) {
      const segments = e.instancePath.split("/").slice(1);
      const path = segments.map((s) => (/^[0-9]+$/.test(s) ? Number(s) : s));
      const where = pathText(path) || "(object)";
      const extra = e.params?.missingProperty ? ` (${e.params.missingProperty})` : "";
      problems.push(`${where}: ${e.message}${extra}`);
    }
  }
  if (problems.length === 0) {
    for (const { path, value, read } of seen) {
      if (Array.isArray(value)) continue;
      for (const k of Object.keys(value)) {
        if (!read.has(k)) problems.push(`${pathText([...path, k])}: unknown field "${k}"`);
      }
    }
  }
  return problems;
}

async function main(argv) {
  let dump = null;
  let parseOnly = false;
  const files = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--dump-json") dump = argv[++i];
    else if (argv[i] === "--parse-only") parseOnly = true;
    else files.push(argv[i]);
  }
  if (files.length === 0) {
    console.error("usage: node validate_manifests.mjs [--dump-json OUT.json] [--parse-only] " +
                  "FILE.yaml...");
    return 2;
  }
  const objects = [];
  const names = [];
  let failures = 0;
  for (const file of files) {
    const docs = parseAllDocuments(readFileSync(file, "utf8"));
    for (const doc of Array.isArray(docs) ? docs : [docs]) {
      if (doc.errors.length > 0) {
        for (const e of doc.errors) console.log(`${file}: YAML: ${e.message}`);
        failures++;
        continue;
      }
      const obj = doc.toJS();
      if (obj === null || obj === undefined) continue;
      objects.push(obj);
      const name = `${obj?.kind}/${obj?.metadata?.name}`;
      names.push(name);
      for (const p of parseOnly ? [] : await validateObject(obj)) {
        console.log(`${file}: ${name}: ${p}`);
        failures++;
      }
    }
  }
  if (dump) writeFileSync(dump, JSON.stringify(objects, null, 1));
  if (failures > 0) return 1;
  if (objects.length === 0) {
    console.log("no objects found");
    return 1;
  }
  const verb = parseOnly ? "parsed" : "validated";
  console.log(`${verb} ${objects.length} objects: ${names.join(" ")}`);
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
