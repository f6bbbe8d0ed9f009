"""Packaged SmolLM2 length samples (see :func:`icml26.tie.lengthstudy._packaged`).

Real samples, not synthetic: SmolLM2-135M-Instruct (bf16, chat template), T = 1.0, cap 48,
seed 0, the refilling sampler; the 12 ``tiny`` prompts (``prompt_set(96, seed=0)[:12]``) x 8; each entry is (lengths, censored flags, prompt tokens).
Regenerate: delete the cache file named below and run ``collect`` with the tiny StudyConfig.
"""

FIXTURES: dict = {
    'lengths-smollm2-135m-instruct-bf16-T1-cap48-seed0.json': {
        'e2a6f7dcedd23d7f': ([35, 36, 44, 48, 48, 48, 48, 48], [0, 0, 0, 1, 1, 1, 1, 1], 150),
        '305613b20489f8c6': ([10, 25, 27, 27, 31, 46, 48, 48], [0, 0, 0, 0, 0, 0, 1, 1], 41),
        '1df8832501f3c369': ([47, 48, 48, 48, 48, 48, 48, 48], [0, 1, 1, 1, 1, 1, 1, 1], 70),
        'dd109c4c3c148323': ([34, 48, 48, 48, 48, 48, 48, 48], [0, 1, 1, 1, 1, 1, 1, 1], 36),
        '8abebc183988c9a6': ([17, 29, 48, 48, 48, 48, 48, 48], [0, 0, 1, 1, 1, 1, 1, 1], 40),
        'ea568f4f8ddf8f8e': ([2, 2, 3, 18, 24, 44, 48, 48], [0, 0, 0, 0, 0, 0, 1, 1], 46),
        '8f433da5416b756d': ([48, 48, 48, 48, 48, 48, 48, 48], [1, 1, 1, 1, 1, 1, 1, 1], 162),
        'e38757b2b6952bb9': ([48, 48, 48, 48, 48, 48, 48, 48], [1, 1, 1, 1, 1, 1, 1, 1], 41),
        'a09b91ba2b2e99e8': ([48, 48, 48, 48, 48, 48, 48, 48], [1, 1, 1, 1, 1, 1, 1, 1], 69),
        'f4e93288091fc988': ([21, 43, 48, 48, 48, 48, 48, 48], [0, 0, 1, 1, 1, 1, 1, 1], 36),
        '40758ce00ab3beee': ([44, 48, 48, 48, 48, 48, 48, 48], [0, 1, 1, 1, 1, 1, 1, 1], 39),
        'b206c67a855a6484': ([6, 21, 38, 39, 48, 48, 48, 48], [0, 0, 0, 0, 1, 1, 1, 1], 50),
    },
}
