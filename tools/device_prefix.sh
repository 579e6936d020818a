# Source on a CUDA machine without a Jupyter stack: installs the carried wheels (.whl/) into
# /tmp/site and registers the python3 kernel. Usage: FLASHCORE_COMMIT=<hash> . tools/device_prefix.sh
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 MPLBACKEND=agg
python3 -m ipykernel install --user --name python3 >/dev/null 2>&1
