# Source this on the GPU box before bench/closed_loop.py (docs/closed_loop.md): it installs the carried
# wheels (.whl, .whl-grpo, .whl-multi: requirements.lock's versions of what the image lacks) into
# /tmp/site once per machine, each wheel once (some are in two folders), and sets the environment.
# The wheel folders are looked for in CLOSED_LOOP_WHEELS (default: here; `..` when running from a
# snapshot folder inside the checkout, as the GPU run did).
#   . bench/closed_loop_setup.sh && python3 bench/closed_loop.py --profile gpu data --out out/closed-loop
if [ ! -f /tmp/site/.ok ]; then
  W=${CLOSED_LOOP_WHEELS:-.}
  ls "$W"/.whl/*.whl "$W"/.whl-grpo/*.whl "$W"/.whl-multi/*.whl | awk -F/ '!seen[$NF]++' |
    xargs python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site &&
    touch /tmp/site/.ok || return 1
  # The verifier's workers and references never write bytecode (the sandbox), and the wheels above go in
  # uncompiled, as the image's torch did: each worker compiled torch._inductor, networkx and the rest from
  # source, 403 of the 2,861 samples of a 123 s KernelBench job (L1 #19, H200, 2026-12-01). Once per machine.
  T=$(date +%s)
  python3 -m compileall -qq -j0 /tmp/site "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    >/dev/null 2>&1 || true
  echo "closed_loop_setup: bytecode compiled in $(( $(date +%s) - T )) s" >&2
fi
export PYTHONPATH=/tmp/site:$PWD TRITONFORGE_DATA=$PWD/data PYTHONUNBUFFERED=1
