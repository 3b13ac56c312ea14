// The browser node's identity: a WebCrypto Ed25519 key pair whose private half is non-extractable,
// kept in IndexedDB, so a second visit is the same node. Returns the raw 32-byte public key and a signer.
const DB = "ce-bench", STORE = "keys", ID = "node";

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

export async function nodeKey() {
  if (!crypto.subtle) throw new Error("WebCrypto is unavailable: the page is not a secure context");
  let pair = await idb("readonly", (s) => s.get(ID));
  let created = false;
  if (!pair) {
    try {
      pair = await crypto.subtle.generateKey({ name: "Ed25519" }, false, ["sign", "verify"]);
    } catch (err) {
      throw new Error(`this browser has no WebCrypto Ed25519 (${err.message}); a browser from 2025 or later is needed`);
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
