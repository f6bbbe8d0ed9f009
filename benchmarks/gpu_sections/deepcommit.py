"""DeepCommit: no GPU step; the milestone grouping is NumPy/SciPy on the CPU by design."""

CPU_ONLY = ("grouping is IDF-Jaccard/time/author matrices plus SciPy agglomerative clustering on "
            "CPU; its one neural input, MiniLM message embeddings, comes from the packaged CPU "
            "embedder (core.embed, no device option in deepcommit; the package does not travel "
            "to the GPU machine), and the optional LLM pass is any chat model, not deepcommit code")
