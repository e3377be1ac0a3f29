"""SGLang 0.5.23 adapters: plan mode (knobs, platform, pool sizing, PrefillAdder trace) and live argv."""
