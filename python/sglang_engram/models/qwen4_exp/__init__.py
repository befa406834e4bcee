"""Qwen3.8-Flash-Next (SGLang's ``qwen4_exp``): its n-gram table ("PLE") under the plugin."""
