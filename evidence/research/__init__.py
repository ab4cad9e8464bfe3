"""Research over the current frame and the artifact: evaluation, the research tools, the journal, presentation.

These compute answers and the lookups they consumed; they know no price (the tool edge meters and charges)."""
