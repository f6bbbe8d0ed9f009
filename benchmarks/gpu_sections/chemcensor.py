"""ChemCensor: no GPU step that can run on the bare GPU machine; scoring is RDKit on the CPU."""

CPU_ONLY = ("scoring (reaction parsing, centres, functional groups, precedent lookup) is RDKit "
            "graph code on CPU, and every chemcensor module imports RDKit, which the bare GPU "
            "machine lacks; its torch parts are the RXNMapper worker (its own transformers-4.57 "
            "site, not carried) and LLM proposals through HF generate (core chat, not ChemCensor)")
