"""Why do the stored weights of a short ancestry lose to mimetic on unseen classes? Controlled swaps.

Reads the ancestries ``learngene bench --profile transfer`` cached in its out folder (an ancestry the cache
lacks is trained as the bench trains it) and builds, for each upstream, size and seed, descendants that take each
part of the model either from ``pretrained`` (the ancestry's own weights, P) or from ``mimetic`` (M:
mimetic's attention and sin-cos table, timm's init elsewhere, drawn with the same seed as the bench's
mimetic cell). The parts: ``patch`` (patch embedding, class token), ``pos`` (position table), ``attn``
(q/k/v/proj weights and biases), ``norm`` (every LayerNorm) and ``mlp``. Every descendant gets the
task's fresh head and the bench's exact fine-tune (20 labels per unseen class, 5 epochs of batch 25).

``--mode swap`` fine-tunes the named hybrids (e.g. ``P-attn,pos``: pretrained with mimetic's attention and
position table; ``M+mlp``: mimetic with the ancestry's MLPs); ``--mode stats`` prints, before any
training, each initialization's loss and gradient norm at step 0 on the task's images, the norm of the
residual stream after each block, and each layer's attention entropy and mean attention distance (in
patches, over the patch tokens' attention to other patch tokens); ``--mode scale`` prints the data-free
attention logit scale per layer that ``untrained_attention=mimetic`` decides by (ancestries, ``--genes``);
``--mode fix`` fine-tunes ``--methods`` without and with that option and marks them by compare's and bench's rule
(the paired t-test over seeds, Holm-corrected over the comparisons of an upstream and depth); with ``--from-csv``
it marks the same cells as a bench run of the profile stored them (its ``results.csv``) instead of fine-tuning.

    PYTHONPATH=src python benchmarks/transfer_why.py --out runs/bench-transfer --mode swap
    PYTHONPATH=src python benchmarks/transfer_why.py --mode fix --upstreams A-short B-short
    PYTHONPATH=src python benchmarks/transfer_why.py --mode fix --from-csv docs/bench-transfer/results.csv
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
from collections import defaultdict

import torch
import torch.nn.functional as F
from torchvision.datasets import FashionMNIST  # the class names of the splits

from learngene.bench import get_profile
from learngene.bench.profiles import SPLIT_A, SPLIT_B, Task
from learngene.bench.protocol import BenchRun
from learngene.bench.rows import read_csv
from learngene.bench.stats import decide_pairs
from learngene.bench.tasks import load_task
from learngene.binding import bind_gene
from learngene.descendant import make_descendant
from learngene.gene import Learngene
from learngene.pipeline.fine_tuning import fresh_head
from learngene.registry import get_method
from learngene.training.loop import train
from learngene.vit.attention_init import UNTRAINED_ATTENTION_SCALE, attention_logit_scale

PARTS = {
    "patch": r"^(patch_embed\.|cls_token)",
    "pos": r"^pos_embed$",
    "attn": r"^blocks\.\d+\.attn\.",
    "norm": r"^(blocks\.\d+\.norm[12]\.|norm\.)",
    "mlp": r"^blocks\.\d+\.mlp\.",
}


def part_of(key: str) -> str | None:
    return next((p for p, rx in PARTS.items() if re.search(rx, key)), None)


def hybrid_state(name: str, pretrained: dict, mimetic: dict) -> dict:
    """``P``/``M`` alone, ``P-a,b`` (pretrained with parts a, b from mimetic) or ``M+a,b`` (the converse).

    A ``blocks.N`` suffix on a part (``attn@1``) restricts it to layer N; ``last`` stands for every part of
    the last block."""
    if name in ("P", "M"):
        return dict(pretrained if name == "P" else mimetic)
    base, other = (pretrained, mimetic) if name[0] == "P" else (mimetic, pretrained)
    chosen = name[2:].split(",")
    out = dict(base)
    depth = 1 + max(int(k.split(".")[1]) for k in base if k.startswith("blocks."))
    for key in base:
        part = part_of(key)
        layer = int(key.split(".")[1]) if key.startswith("blocks.") else None
        for c in chosen:
            p, _, at = c.partition("@")
            if p == "last" and layer == depth - 1:
                out[key] = other[key]
            elif p == part and (not at or layer == int(at)):
                out[key] = other[key]
    return out


def descendant(state: dict, spec, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = spec.create_model()
    model.load_state_dict(state)
    fresh_head(model, spec, seed)
    return model


@torch.no_grad()
def attention_stats(model, images: torch.Tensor, grid: int) -> list[tuple[float, float, float]]:
    """Per block: (entropy of patch→patch attention in nats, mean attention distance in patches, residual norm)."""
    stats, captured = [], {}
    hooks = [
        blk.attn.register_forward_pre_hook(lambda m, a, i=i: captured.__setitem__(i, a[0]))
        for i, blk in enumerate(model.blocks)
    ]
    residual = []
    hooks += [
        blk.register_forward_hook(lambda m, a, out: residual.append(out.norm(dim=-1).mean().item()))
        for blk in model.blocks
    ]
    model.eval()
    model(images)
    for h in hooks:
        h.remove()
    ys, xs = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    pos = torch.stack([ys.flatten(), xs.flatten()], -1).float()
    dist = torch.cdist(pos, pos)  # (N, N) patch distances
    for i, blk in enumerate(model.blocks):
        x = captured[i]
        B, N, C = x.shape
        H = blk.attn.num_heads
        qkv = blk.attn.qkv(x).reshape(B, N, 3, H, C // H).permute(2, 0, 3, 1, 4)
        q, k = qkv[0], qkv[1]
        attn = (q @ k.transpose(-2, -1) * blk.attn.scale).softmax(-1)  # (B, H, N, N)
        pp = attn[:, :, 1:, 1:]  # patch tokens to patch tokens
        pp = pp / pp.sum(-1, keepdim=True)
        entropy = -(pp * pp.clamp_min(1e-12).log()).sum(-1).mean().item()
        distance = (pp * dist).sum(-1).mean().item()
        stats.append((entropy, distance, residual[i]))
    return stats


def step0(model, images, labels) -> tuple[float, dict[str, float]]:
    model.train()
    model.zero_grad()
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    norms: dict[str, float] = {}
    for name, p in model.named_parameters():
        part = part_of(name) or ("head" if name.startswith("head") else "other")
        norms[part] = norms.get(part, 0.0) + p.grad.pow(2).sum().item()
    model.zero_grad()
    return loss.item(), {k: math.sqrt(v) for k, v in norms.items()}


FIX = "+mimetic-if-untrained"  # the bench's variant of a method with untrained_attention=mimetic


def fix_rows(run, task, td, ancestry, spec, seeds, methods, upstream) -> None:
    """Each method's descendants fine-tuned as the bench does, without and with ``untrained_attention=mimetic``,
    marked by :func:`fix_table`."""

    def finetune(gene, **options) -> dict[int, float]:
        accs = {}
        for seed in seeds:
            model = make_descendant(gene, spec, seed=seed, **options)
            fresh_head(model, spec, seed)
            cfg = run._cfg(
                epochs=task.epochs, seed=seed, eval_every=0, eval_images=task.eval_images, batch_size=task.batch_size
            )
            accs[seed] = 100 * train(model, td.train, cfg, eval_data=td.eval).final_acc
        return accs

    results = {"mimetic": finetune(get_method("mimetic")().condense(None))}
    for name in methods:
        gene = get_method(name)().condense(ancestry)
        results[name] = finetune(gene)
        results[f"{name} {FIX}"] = finetune(gene, untrained_attention="mimetic")
    print("\n".join(fix_table(results, methods, f"{upstream:11s} L{spec.depth}")), flush=True)


def fix_table(results: dict[str, dict[int, float]], methods, where: str) -> list[str]:
    """One line per cell (top-1 in % by seed): mimetic, then each method without and with the option, with its
    marks by compare's and bench's rule (:func:`learngene.bench.stats.decide_pairs`: the paired t-test over the
    seeds, Holm-corrected over this upstream and depth's comparisons): ``M`` against mimetic, ``K`` against the
    same method without the option; the last line gives m."""
    pairs = []
    for name in methods:
        pairs += [(name, "mimetic"), (f"{name} {FIX}", "mimetic"), (f"{name} {FIX}", name)]
    verdicts, m = decide_pairs(results, [(a, b) for a, b in pairs if a in results and b in results])
    lines = []
    for label, accs in results.items():
        marks = " ".join(
            f"{'M' if other == 'mimetic' else 'K'}{verdicts[label, other].mark}"
            for other in ("mimetic", label.removesuffix(f" {FIX}"))
            if (label, other) in verdicts
        )
        values = list(accs.values())
        lines.append(
            f"{where} {label:34s} {statistics.fmean(values):5.1f} ± {statistics.stdev(values):4.1f} {marks:7s} "
            f"[{' '.join(f'{v:.1f}' for v in values)}]"
        )
    return [*lines, f"{where} Holm over the m = {m} comparisons of this upstream and depth (5 % family-wise)"]


def fix_from_csv(path: str, task: str, upstreams: list[str], depths: list[int], methods: list[str]) -> None:
    """:func:`fix_table` for the cells a bench run of the profile stored (its ``results.csv``), per upstream and
    depth: mimetic and each method without and with the option (the profile's ``+mimetic-if-untrained`` rows)."""
    wanted = ["mimetic", *(label for name in methods for label in (name, f"{name} {FIX}"))]
    cells: dict[tuple[str, int], dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in read_csv(path):
        if r.ok and r.task == task and r.upstream in upstreams and r.depth in depths and r.label in wanted:
            cells[r.upstream, r.depth][r.label][r.seed] = 100 * r.acc
    for (upstream, depth), results in sorted(cells.items(), key=lambda c: (upstreams.index(c[0][0]), c[0][1])):
        ordered = {label: dict(sorted(results[label].items())) for label in wanted if label in results}
        print("\n".join(fix_table(ordered, methods, f"{upstream:11s} L{depth}")))


def print_scales(ancestry, up) -> None:
    """The rule's input: each layer's attention logit scale in the ancestry."""
    scale = attention_logit_scale
    state = ancestry.state()
    print(f"{up.name:26s} " + " ".join(f"{scale(state, ancestry.spec, i):.3f}" for i in range(ancestry.spec.depth)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench-transfer", help="the transfer bench's out folder (its cache)")
    parser.add_argument("--upstreams", nargs="*", default=["A-short", "B-short"], help="upstream names of the profile")
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4], help="descendant depths (width 64, 4 heads)")
    parser.add_argument(
        "--mode",
        choices=("swap", "stats", "fix", "scale"),
        default="swap",
        help="fine-tune hybrids; step-0 statistics; fine-tune --methods without and with "
        "untrained_attention=mimetic (marks against mimetic and the method without it); "
        "or print each ancestry's attention logit scale per layer (the rule's input)",
    )
    parser.add_argument(
        "--methods", nargs="+", default=["pretrained", "auto_lg", "heru_lg"], help="the methods of --mode fix"
    )
    parser.add_argument(
        "--inits",
        nargs="+",
        default=["M", "P", "P-attn,pos", "M+mlp", "M+mlp,patch,norm", "P-last"],
        help="P/M, P-parts (pretrained with mimetic's parts), M+parts (the converse); "
        "parts: " + ", ".join(PARTS) + ", last; part@N: only layer N",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: the profile's")
    parser.add_argument(
        "--from-csv",
        default=None,
        metavar="RESULTS_CSV",
        help="--mode fix: mark the cells a bench run of the profile stored in this results.csv instead of "
        "fine-tuning them",
    )
    parser.add_argument(
        "--genes",
        nargs="*",
        default=[],
        help="--mode scale: also the attention logit scale of these gene files expanded to the "
        "ancestry's size (e.g. runs/bench-transfer/genes/tleg-*.safetensors)",
    )
    args = parser.parse_args()

    profile = get_profile("transfer")
    seeds = args.seeds or list(profile.seeds)
    if args.mode == "fix" and args.from_csv:
        return fix_from_csv(args.from_csv, profile.tasks[0].name, args.upstreams, args.depths, args.methods)
    run = BenchRun(profile, args.out, progress=False)
    loaded: dict = {}
    load_task(Task("upstream", "fashion_mnist", epochs=1), profile.ancestry, None, loaded)
    task = profile.tasks[0]
    pretrained, mimetic = get_method("pretrained")(), get_method("mimetic")()
    if args.mode == "scale":
        spec = profile.ancestry.replace(num_classes=5)
        scale = attention_logit_scale
        print(
            f"attention logit scale per layer (rule: untrained below "
            f"{UNTRAINED_ATTENTION_SCALE}); references at seed 0, L{spec.depth}"
        )
        torch.manual_seed(0)
        for name, state in (
            ("timm init", spec.create_model().state_dict()),
            ("mimetic", mimetic.expand(mimetic.condense(None), spec)),
        ):
            print(f"{name:26s} " + " ".join(f"{scale(state, spec, i):.3f}" for i in range(spec.depth)))
        for path in args.genes:
            gene = Learngene.load(path)
            with torch.no_grad():
                state = bind_gene(gene, check=False).method.expand(gene, spec)
            layers = [i for i in range(spec.depth) if f"blocks.{i}.attn.qkv.weight" in state]
            classes = (gene.label_space or {}).get("classes", [])
            split = next(
                (
                    name
                    for name, ids in (("A", SPLIT_A), ("B", SPLIT_B))
                    if classes == [FashionMNIST.classes[i] for i in ids]
                ),
                "?",
            )
            print(
                f"{path.rsplit('/', 1)[-1]:38s} split {split} steps {gene.cost.get('steps', '-')!s:4s} "
                f"aux top-1 {gene.cost.get('aux_eval_acc', '-')!s:5s} "
                + " ".join(f"{scale(state, spec, i):.3f}" for i in layers)
            )
    if args.mode == "swap":
        print(
            f"top-1 (%) on {task.eval_images} test images of the unseen classes after the bench's fine-tune, "
            f"mean ± std over seeds {', '.join(map(str, seeds))}"
        )
    for up in (u for u in profile.upstreams if u.name in args.upstreams):
        td = load_task(task, profile.ancestry, None, loaded, up.classes)
        anc_images, _, upstream_eval = run._upstream_data(up, loaded)
        ancestry = run.ancestry(anc_images, upstream_eval, up)  # from the cache
        if args.mode == "scale":
            print_scales(ancestry, up)
            continue
        p_gene = pretrained.condense(ancestry)
        m_gene: Learngene = mimetic.condense(ancestry)
        for depth in args.depths:
            spec = run.ancestry_spec(up).replace(depth=depth)
            grid = spec.grid_size
            if args.mode == "fix":
                fix_rows(run, task, td, ancestry, spec, seeds, args.methods, up.name)
                continue
            results: dict[str, list] = {name: [] for name in args.inits}
            for seed in seeds:
                p_state = make_descendant(p_gene, spec, seed=seed).state_dict()
                m_state = make_descendant(m_gene, spec, seed=seed).state_dict()
                for name in args.inits:
                    model = descendant(hybrid_state(name, p_state, m_state), spec, seed)
                    if args.mode == "stats":
                        images, labels, _ = td.train.get_batch(torch.arange(len(td.train)))
                        loss, grads = step0(model, images, labels)
                        results[name].append((loss, grads, attention_stats(model, images, grid)))
                        continue
                    cfg = run._cfg(
                        epochs=task.epochs,
                        seed=seed,
                        eval_every=0,
                        eval_images=task.eval_images,
                        batch_size=task.batch_size,
                    )
                    results[name].append(100 * train(model, td.train, cfg, eval_data=td.eval).final_acc)
            for name, values in results.items():
                if args.mode == "swap":
                    print(
                        f"{up.name:9s} L{depth} {name:22s} {statistics.fmean(values):5.1f} ± "
                        f"{statistics.stdev(values):4.1f}  [{' '.join(f'{v:.1f}' for v in values)}]",
                        flush=True,
                    )
                    continue
                loss = statistics.fmean(v[0] for v in values)
                grads = {k: statistics.fmean(v[1][k] for v in values) for k in values[0][1]}
                per_layer = [
                    tuple(statistics.fmean(v[2][i][j] for v in values) for j in range(3)) for i in range(depth)
                ]
                print(
                    f"{up.name:9s} L{depth} {name:18s} loss0 {loss:.3f}  grad0 "
                    + " ".join(f"{k}={g:.3f}" for k, g in sorted(grads.items()))
                )
                print(
                    f"{'':31s} entropy/dist/|x| per block: "
                    + "  ".join(f"{e:.2f}/{d:.2f}/{r:.1f}" for e, d, r in per_layer),
                    flush=True,
                )


if __name__ == "__main__":
    main()
