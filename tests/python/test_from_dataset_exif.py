"""python tier, differential (issue #34, E1): photos a camera tagged as rotated (EXIF
Orientation 6 and 8) come out of Loader.from_dataset with torchvision's pixels: ImageFolder's
PIL loader does not apply the orientation, so the job from_dataset defines decodes with
`exif_orientation: false` (the YAML `decode:` default, which applies it, is unchanged)."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from PIL import Image, ImageOps  # noqa: E402
from torchvision import datasets, transforms as T  # noqa: E402

import stoker  # noqa: E402

W, H = 40, 24  # stored landscape: the orientation would make it portrait


@pytest.fixture(scope="module")
def rotated_root(tmp_path_factory):
    """Smooth gradients (red along x, green along y) saved as JPEG with Orientation 6 / 8 / 1."""
    root = tmp_path_factory.mktemp("exif")
    for k, orientation in enumerate((6, 8, 1)):
        d = root / f"class{k}"
        d.mkdir()
        img = Image.new("RGB", (W, H))
        img.putdata([(6 * x, 10 * y, 60 + 40 * k) for y in range(H) for x in range(W)])
        exif = Image.Exif()
        exif[0x0112] = orientation
        img.save(d / "photo.jpg", "JPEG", quality=95, exif=exif.tobytes())
    return str(root)


def test_exif_rotated_photos_give_torchvisions_pixels(daemon, rotated_root):
    tf = T.Compose([T.Resize([16, 16]), T.PILToTensor()])
    ds = datasets.ImageFolder(rotated_root, transform=tf)
    assert [Image.open(p).getexif().get(0x0112) for p, _ in ds.samples] == [6, 8, 1]
    loader = stoker.Loader.from_dataset(ds, batch_size=3, socket=daemon.socket)
    assert 'decode: {"exif_orientation": false}' in loader._definition
    b = next(loader.batches())
    for k, i in enumerate(b.ids.tolist()):
        ref, label = ds[i]
        assert int(b.labels[k]) == label
        diff = (b.images[k].to(torch.int16) - ref.to(torch.int16)).abs()
        # The limit test_from_dataset.py's per-pixel comparisons use.
        assert diff.max().item() <= 4 and diff.float().mean().item() < 0.5, (i, diff.max().item())
        # The photo rotated as the EXIF tag says is far from it: the comparison can tell.
        path = ds.samples[i][0]
        turned = tf(ImageOps.exif_transpose(Image.open(path).convert("RGB")))
        if i < 2:
            assert (b.images[k].to(torch.int16) - turned.to(torch.int16)).abs().float().mean() > 10
    loader.close()

