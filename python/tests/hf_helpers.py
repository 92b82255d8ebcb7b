"""A small causal LM and its data for the Hugging Face client tests: GPT-2
shaped, built from a config (random init, no hub), trained on text made
here from a seed (a few thousand characters of a tiny vocabulary), one
character a token."""
import random

import torch

WORDS = ("the store keeps every tier of state on two paths and the step "
         "reads each moment and writes the master weights back while a tag "
         "holds the checkpoint").split()
BLOCK = 32


def corpus(n_chars=6000, seed=0):
    rng = random.Random(seed)
    out, size = [], 0
    while size < n_chars:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out) + "."


class CharBlocks(torch.utils.data.Dataset):
    """Consecutive BLOCK-character windows of the corpus as token ids, each
    its own labels (the model shifts them)."""

    def __init__(self, text=None):
        text = text or corpus()
        self.vocab = sorted(set(text))
        ids = torch.tensor([self.vocab.index(c) for c in text])
        n = (len(ids) - 1) // BLOCK
        self.blocks = ids[:n * BLOCK].view(n, BLOCK)

    def __len__(self):
        return len(self.blocks)

    def __getitem__(self, i):
        x = self.blocks[i]
        return {"input_ids": x, "labels": x.clone()}


def tiny_gpt2(vocab_size, seed=0):
    """GPT-2 shaped, 2 layers of width 32, no dropout (runs compare
    exactly)."""
    import transformers
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(
        vocab_size=vocab_size, n_positions=BLOCK, n_embd=32, n_layer=2,
        n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg)


def tiny_llama(vocab_size, seed=0):
    import transformers
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        max_position_embeddings=BLOCK)
    return transformers.LlamaForCausalLM(cfg)


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def max_param_diff(a, b):
    assert a.keys() == b.keys()
    return max((a[n].float() - b[n].float()).abs().max().item() for n in a)
