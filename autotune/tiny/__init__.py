"""The tiny random-weight models the demo and the tests serve, made locally (no hub access):
`model` writes a Llama-, Qwen- or MoE-shaped checkpoint, `quant` an AWQ 4-bit one from it.
"""
