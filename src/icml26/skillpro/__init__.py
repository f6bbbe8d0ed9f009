"""Skill-Pro: a procedural skill library for LLM agents evolved by Non-Parametric PPO (SKILL.md)."""

from icml26.skillpro.skill import Skill, SkillPool, load_pool, save_pool

__all__ = ["Skill", "SkillPool", "load_pool", "save_pool"]
