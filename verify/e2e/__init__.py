"""CPU end-to-end tier: pristine vs patched vLLM from the CPU wheel, on a local tiny
model. `python -m verify.e2e --help` lists the steps; each writes results/cpu/<version>/<step>.json.
"""
