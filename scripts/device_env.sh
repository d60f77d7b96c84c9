# Sourced by the device scripts: install the carried wheels (.whl/, e.g. transformers 5.23 over the
# image's 5.17, simpy) into /tmp/site and put them and this checkout on PYTHONPATH.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 COSTMODEL_NO_PROGRESS=1 TOKENIZERS_PARALLELISM=false
