// The browser node's identity: a WebCrypto Ed25519 key pair whose private half is non-extractable,
// kept in IndexedDB, so a second visit is the same node. Returns the raw 32-byte public key and a signer.
// Browsers without WebCrypto Ed25519 fall back to @noble/ed25519 (vendored from npm by build.py); its
// secret key has to be stored as bytes, and the profile's evidence names which signer was used.
const DB = "ce-bench", STORE = "keys", ID = "node", NOBLE_ID = "node-noble";

function idb(mode, fn) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(DB, 1);
    open.onupgradeneeded = () => open.result.createObjectStore(STORE);
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const tx = open.result.transaction(STORE, mode);
      const req = fn(tx.objectStore(STORE));
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
    };
  });
}

async function nobleKey() {
  let ed;
  try {
    ed = await import("/vendor/noble-ed25519.js");
  } catch (err) {
    throw new Error(`this browser has no WebCrypto Ed25519 and the fallback signer did not load (${err.message})`);
  }
  let secret = await idb("readonly", (s) => s.get(NOBLE_ID));
  const created = !secret;
  if (!secret) {
    secret = ed.utils.randomSecretKey();
    await idb("readwrite", (s) => s.put(secret, NOBLE_ID));
  }
  return { publicKey: await ed.getPublicKeyAsync(secret), created, signer: "noble-ed25519",
           sign: (message) => ed.signAsync(message, secret) };
}

export async function nodeKey() {
  if (!crypto.subtle) throw new Error("WebCrypto is unavailable: the page is not a secure context");
  let pair = await idb("readonly", (s) => s.get(ID));
  let created = false;
  if (!pair && (await idb("readonly", (s) => s.get(NOBLE_ID)))) return nobleKey(); // keep the same node id
  if (!pair) {
    try {
      pair = await crypto.subtle.generateKey({ name: "Ed25519" }, false, ["sign", "verify"]);
    } catch {
      return nobleKey();
    }
    await idb("readwrite", (s) => s.put(pair, ID));
    created = true;
  }
  const publicKey = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey));
  return {
    publicKey, created, signer: "webcrypto-ed25519",
    async sign(message) { return new Uint8Array(await crypto.subtle.sign({ name: "Ed25519" }, pair.privateKey, message)); },
  };
}

export function b64url(bytes) {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

export const hex = (bytes) => [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
export const unhex = (text) => Uint8Array.from(text.match(/../g) || [], (h) => parseInt(h, 16));
