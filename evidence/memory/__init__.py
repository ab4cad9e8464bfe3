"""Market Memory: point-in-time features, strategy states, the build (map over symbols, reduce into one immutable
artifact), the artifact format both sides read, and the read-only reader every web process serves from."""
