"""The project's data, installed as the package `tritonforge_data`: the operator catalog (ops/), the
problem and dataset-card templates (templates/), prompt sets (prompts/), the lowering teacher's
kernel templates (lowering/), shipped configs (configs/) and verifier fixtures (fixtures/).

Code finds it with `importlib.resources.files("tritonforge_data")` (see `synth.catalog.DATA_DIR`),
so an installed wheel works from any directory; in the checkout the editable install maps this
folder to the same name. Nothing here is imported as code.
"""
