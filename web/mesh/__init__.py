"""ce-bench inside the CE mesh (issue 31, docs/mesh.md): the relay as a libp2p peer that gossips the signed
records it accepts and takes the ones other peers publish under the rules of every other way in."""
