"""The publication log: an RFC 9162 Merkle tree over canonical JSON entries, C2SP signed checkpoints, proofs and
the daily commitment of every metered answer's hash. The offline verifier is `leroy_verify` (it imports none of
this; this imports its pure Merkle and signed-note modules)."""
