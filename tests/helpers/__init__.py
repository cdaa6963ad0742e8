"""The only home of code the tests share (a test file never imports another test file;
tests/test_layout.py checks it): tiny models and checkpoints (models.py), the tiny Hugging Face
model of each family (hf_family_models.py) and sessions on it (families.py), decoders with the
family switches (family_switches.py), tokenizer folders and prompts (tokenizers.py, charsmaps.py,
panics.py), the float32 tolerance rule (tolerances.py), traces of real sizes built without a
model (fake_traces.py), sessions that keep no full arrays (compact.py), training inputs
(training.py), a loaded main window (window.py), the hardening suite's tiny model, dialogs and
exception hooks (hardening.py), hostile prompts (hostile_prompts.py), the GUI monkey (monkey.py),
failing opens (failing_open.py), a Hugging Face cache entry (hf_hub.py) and the command line run
in-process (cli.py)."""
