"""Data for the Hugging Face ALBERT trainers: a SentencePiece tokenizer trained on the corpus, the corpus cut into
text segments, and batches that are a pure function of (seed, rank, batch number).

Tokenising and masking happen in the DataLoader (in its worker processes when --num-workers > 0), as in the
seeds' setup, so the number of loader workers matters the way it does there.
"""
import os
import shutil
import tempfile

import torch
import torch.distributed as dist
from transformers import AlbertTokenizer, DataCollatorForLanguageModeling


def load_tokenizer(directory, corpus, vocab_size):
    """AlbertTokenizer over a SentencePiece unigram model in `directory`, trained on `corpus` first if missing.

    ALBERT's own layout: <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4, case folded (AlbertTokenizer lower-cases).
    Nothing is downloaded. In a process group, shared_tokenizer calls it on rank 0 first.
    """
    model = os.path.join(directory, "spiece.model")
    if not os.path.exists(model):
        import sentencepiece

        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            sentencepiece.SentencePieceTrainer.train(
                input=corpus, model_prefix=os.path.join(tmp, "spiece"), vocab_size=vocab_size, model_type="unigram",
                character_coverage=1.0, normalization_rule_name="nmt_nfkc_cf", pad_id=0, unk_id=1, bos_id=-1,
                eos_id=-1, user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"], num_threads=2,
                input_sentence_size=2_000_000, minloglevel=2)
            # Renamed into place: other ranks (other nodes) wait for the file, never see half of it.
            shutil.move(os.path.join(tmp, "spiece.model"), model)
    tokenizer = AlbertTokenizer.from_pretrained(directory)
    expected = {"<pad>": 0, "<unk>": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    got = {token: tokenizer.convert_tokens_to_ids(token) for token in expected}
    if got != expected:
        raise ValueError(f"tokenizer in {directory} has special tokens at {got}, expected {expected}; delete it "
                         "and let the trainer train a new one")
    return tokenizer


def shared_tokenizer(directory, corpus, vocab_size):
    """load_tokenizer on every rank of the process group: rank 0 first (it trains the model if there is none),
    the others once it is done."""
    if dist.get_rank() != 0:
        dist.barrier()
    tokenizer = load_tokenizer(directory, corpus, vocab_size)
    if dist.get_rank() == 0:
        dist.barrier()
    return tokenizer


def read_segments(corpus, seq_len):
    """The corpus (one document per line) cut into segments that fill most of `seq_len` tokens, at word boundaries:
    0.6 * seq_len words (~1.5 tokens a word at a 4000-piece vocabulary).

    Segments stay within a document; a document's short tail joins its last segment.
    """
    words_per_segment = max(4, int(seq_len * 0.6))
    segments = []
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            words = line.split()
            starts = list(range(0, len(words), words_per_segment))
            if len(starts) > 1 and len(words) - starts[-1] < words_per_segment // 2:
                starts.pop()
            for i, start in enumerate(starts):
                end = starts[i + 1] if i + 1 < len(starts) else len(words)
                segments.append(" ".join(words[start:end]))
    if not segments:
        raise ValueError(f"corpus {corpus} has no text")
    return segments


class Segments(torch.utils.data.Dataset):
    """Map-style dataset of text segments, tokenised when fetched. Indices are (batch number, segment index):
    the batch number travels with each example so the collator can seed that batch's masks."""

    def __init__(self, segments, tokenizer, seq_len):
        self.segments, self.tokenizer, self.seq_len = segments, tokenizer, seq_len

    def __len__(self):
        return len(self.segments)

    def __getitem__(self, index):
        batch, i = index
        return {"batch": batch, **encode(self.tokenizer, self.segments[i], self.seq_len)}


def encode(tokenizer, text, seq_len):
    """One segment as [CLS] ... [SEP], cut or padded to seq_len, with the special-tokens mask the collator needs."""
    return tokenizer(text, max_length=seq_len, truncation=True, padding="max_length", return_special_tokens_mask=True)


class ShardedBatches(torch.utils.data.Sampler):
    """This rank's batches, forever: epoch e is a permutation of the segments seeded by (seed, e), dealt to the
    ranks round-robin and cut into batches. Starting at batch `start` skips the earlier ones without loading them,
    which is how a resumed run continues where the checkpoint left off."""

    def __init__(self, num_segments, batch_size, rank, world_size, seed, start=0):
        self.per_epoch = num_segments // world_size // batch_size
        if self.per_epoch == 0:
            raise ValueError(f"{num_segments} segments are fewer than one batch of {batch_size} on each of "
                             f"{world_size} ranks; use a larger corpus or a smaller --batch")
        self.num_segments, self.batch_size = num_segments, batch_size
        self.rank, self.world_size, self.seed, self.start = rank, world_size, seed, start

    def __iter__(self):
        batch, epoch, shard = self.start, None, None
        while True:
            if batch // self.per_epoch != epoch:
                epoch = batch // self.per_epoch
                order = torch.randperm(self.num_segments, generator=torch.Generator().manual_seed(self.seed + epoch))
                shard = order[self.rank::self.world_size].tolist()
            first = (batch % self.per_epoch) * self.batch_size
            yield [(batch, i) for i in shard[first:first + self.batch_size]]
            batch += 1


class SeededMasking:
    """transformers' DataCollatorForLanguageModeling (15% of tokens; 80% [MASK], 10% random, 10% kept) with the
    random draws of batch b seeded by (seed, rank, b): the same masks whatever the number of loader workers, and a
    resumed run masks as the uninterrupted one did."""

    def __init__(self, tokenizer, seed, rank):
        self.collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
        self.seed, self.rank = seed, rank

    def __call__(self, examples):
        batch = examples[0]["batch"]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed((self.seed * 1_000_003 + self.rank) * 1_000_003 + batch)
            return self.collator([{k: v for k, v in e.items() if k != "batch"} for e in examples])
