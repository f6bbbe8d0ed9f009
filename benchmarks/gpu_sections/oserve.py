"""OServe: the deployment search, the LP router and the simulator are CPU code by design; the
GPU-side inputs (measured per-layout cost tables) come from profiles, not from this check."""

CPU_ONLY = ("the planner (enumeration + LP routing) and the serving simulator run on CPU; "
            "a GPU enters only through measured cost tables (docs/oserve.md)")
