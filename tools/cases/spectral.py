"""Golden cases for layers/spectral.py: Fourier transforms and complex values, in the shapes
FNet, GFNet and FFC (LaMa) blocks use them."""

from __future__ import annotations

import torch
from torch import nn

from tools.cases import Case, Fn

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


def spectrogram(a, **options):
    """torchaudio's spectrogram (pnnx's ``torchaudio.functional.spectrogram``); torchaudio is
    needed to export these cases only (``pip install torchaudio``)."""
    import torchaudio

    return torchaudio.functional.spectrogram(a, **options)


def mel_front_end(a):
    """A keyword spotter's front end: torchaudio's MelSpectrogram (its window and filter bank
    exported as constants), then log."""
    import torchaudio

    mel = torchaudio.transforms.MelSpectrogram(sample_rate=8000, n_fft=64, hop_length=16, n_mels=10)
    return torch.log(mel(a) + 1e-6)


class GlobalFilter(nn.Module):
    """GFNet's filter: rfft2, times a learned complex weight, irfft2 back."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(6, 4, 8, 2) * 0.1)

    def forward(self, a):
        y = torch.fft.rfft2(a, dim=(1, 2), norm="ortho") * torch.view_as_complex(self.weight)
        return torch.fft.irfft2(y, s=(6, 6), dim=(1, 2), norm="ortho")


class SpectralConv(nn.Module):
    """FFC's spectral unit: rfftn, (real, imag) as channels through a 1x1 conv, back."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 1)

    def forward(self, a):
        f = torch.fft.rfftn(a, dim=(-2, -1), norm="ortho")
        f = torch.stack((f.real, f.imag), dim=-1).permute(0, 1, 4, 2, 3).reshape(1, 8, 6, 4)
        f = torch.relu(self.conv(f)).reshape(1, 4, 2, 6, 4).permute(0, 1, 3, 4, 2)
        return torch.fft.irfftn(torch.complex(f[..., 0], f[..., 1]), s=(6, 6), dim=(-2, -1), norm="ortho")


CASES = [
    # a cross-correlation through the spectrum (Autoformer's auto-correlation)
    Case("conj_of_spectra", Fn(lambda a: (
        torch.fft.irfft(torch.fft.rfft(a) * torch.conj(torch.fft.rfft(a * 2 + 1)), n=8),
        torch.view_as_real(torch.fft.rfft(a).conj().resolve_conj()),
        torch.view_as_real(torch.conj_physical(torch.fft.fft(a))))), (x(2, 8),)),
    Case("fnet_mixing", Fn(lambda a: torch.fft.fft(torch.fft.fft(a, dim=-1), dim=-2).real), (x(2, 6, 8),)),
    Case("real_and_imag_of_one_bin", Fn(lambda a: torch.stack([torch.fft.fft(a)[1].real, torch.fft.fft(a)[1].imag,
                                                                a[0]])), (x(8),)),
    Case("global_filter", GlobalFilter(), (x(1, 6, 6, 8),)),
    Case("spectral_conv", SpectralConv(), (x(1, 4, 6, 6),)),
    Case("ifft_n_forward_abs_angle",
         Fn(lambda a: (torch.fft.ifft(a, n=10, norm="forward").abs(), torch.fft.fft(a).angle())), (x(3, 7),)),
    Case("rfft_irfft_n", Fn(lambda a: (torch.view_as_real(torch.fft.rfft(a, n=6)),
                                       torch.fft.irfft(torch.fft.rfft(a), n=7, dim=1, norm="ortho"))),
         (x(3, 7),)),
    Case("fftn_ifftn_imag", Fn(lambda a: (torch.fft.fftn(a, s=(4, 5)).imag, torch.fft.ifftn(a).real,
                                          torch.fft.ifft2(a, norm="ortho").imag)),
         (x(2, 3, 7),)),
    Case("hfft", Fn(lambda a: torch.fft.hfft(torch.fft.rfft(a), n=8)), (x(3, 8),)),
    # a vocoder's spectrum from its magnitude and phase, then the signal
    Case("polar_to_a_signal", Fn(lambda m, p: (torch.view_as_real(torch.polar(torch.exp(m), p)),
                                               torch.istft(torch.polar(m.abs(), p * 3), 16, 4,
                                                           window=torch.hann_window(16)))),
         (x(1, 9, 20), x(1, 9, 20))),
    # neuralop's spectral convolutions: the spectrum shifted to centre its low modes, and
    # back, of odd and even lengths, real and complex
    Case("fftshift_ifftshift",
         Fn(lambda a: (torch.fft.fftshift(a, dim=(-2,)) + torch.fft.ifftshift(a, dim=(-2, -1)),
                       torch.view_as_real(torch.fft.ifftshift(torch.fft.fftshift(torch.fft.rfft2(a), dim=-2), dim=-2)),
                       torch.fft.fftshift(a))),
         (x(2, 3, 5, 6),)),
    # an FNO at another grid: the lengths back a dynamic export computes from the input's size
    Case("irfft_lengths_of_a_dynamic_size",
         Fn(lambda a: (torch.fft.irfftn(torch.fft.rfftn(a, dim=(-1,), norm="forward") * 2, s=(a.shape[-1],),
                                        dim=(-1,), norm="forward"),
                       torch.fft.irfft2(torch.fft.rfft2(a[:, :2]), s=(a.shape[-2], a.shape[-1])),
                       torch.fft.irfft(torch.fft.rfft(a), n=a.shape[-1]))),
         (x(2, 3, 4, 16),), inputs2=(x(3, 3, 6, 21),)),
    Case("fft2_ihfft_view_as_complex",
         Fn(lambda a, b: (torch.fft.fft2(a).real, torch.fft.ihfft(a[0]).imag, torch.view_as_complex(b).abs())),
         (x(2, 3, 7), x(4, 3, 2))),
    Case("stft_hann_centred", Fn(lambda a: torch.view_as_real(
        torch.stft(a, 32, 8, window=torch.hann_window(32), return_complex=True))), (x(1, 150),)),
    Case("stft_short_window_uncentred_normalized", Fn(lambda a: torch.stft(
        a, 16, 5, win_length=10, window=torch.hamming_window(10), center=False, normalized=True,
        return_complex=True).abs()), (x(2, 70),)),
    Case("stft_no_window_constant_pad_twosided", Fn(lambda a: torch.view_as_real(torch.stft(
        a, 12, pad_mode="constant", onesided=False, return_complex=True))), (x(40),)),
    # torchaudio's spectrogram, whose powers and window normalisation pnnx folds in
    Case("spectrogram_power_2", Fn(lambda a: spectrogram(
        a, pad=0, window=torch.hann_window(32), n_fft=32, hop_length=8, win_length=32, power=2.0,
        normalized=False)), (x(2, 150),)),
    Case("spectrogram_magnitude_window_normalized_padded", Fn(lambda a: spectrogram(
        a, pad=5, window=torch.hamming_window(20), n_fft=32, hop_length=6, win_length=20, power=1.0,
        normalized=True, center=False)), (x(2, 3, 90),)),
    Case("spectrogram_complex_frame_normalized", Fn(lambda a: torch.view_as_real(spectrogram(
        a, pad=0, window=torch.hann_window(16), n_fft=16, hop_length=4, win_length=16, power=None,
        normalized="frame_length", pad_mode="constant", onesided=False))), (x(70),)),
    Case("spectrogram_power_half", Fn(lambda a: spectrogram(
        a, pad=0, window=torch.hann_window(24), n_fft=24, hop_length=12, win_length=24, power=0.5,
        normalized=False)), (x(1, 120),)),
    Case("mel_spectrogram", Fn(mel_front_end), (x(1, 400),)),
    # the Hermitian transforms over several dims: a half spectrum in, real out, and back
    Case("hfft2_ihfft2", Fn(lambda a, b: (torch.fft.hfft2(a), torch.view_as_real(torch.fft.ihfft2(b)))),
         (torch.randn(3, 4, 5, dtype=torch.complex64), x(2, 4, 6))),
    Case("hfftn_ihfftn_s_dims_norms",
         Fn(lambda a, b: (torch.fft.hfftn(a, s=(5, 7), dim=(0, 2), norm="ortho"),
                          torch.fft.hfftn(a, norm="forward"),
                          torch.view_as_real(torch.fft.ihfftn(b, s=(4, 6), norm="ortho")),
                          torch.view_as_real(torch.fft.ihfftn(b, dim=(0, 1), norm="forward")))),
         (torch.randn(4, 3, 5, dtype=torch.complex64), x(3, 5, 7))),
    # istft: the signal back from a spectrum (random here, so overlap-add matters)
    Case("istft_hann_centred", Fn(lambda s: torch.istft(s, 16, hop_length=4, window=torch.hann_window(16))),
         (torch.randn(9, 11, dtype=torch.complex64),)),
    Case("istft_batch_uncentred_normalized_zero_padded",
         Fn(lambda s: torch.istft(s, 16, hop_length=5, window=torch.hamming_window(16), center=False,
                                  normalized=True, length=56)),
         (torch.randn(2, 9, 8, dtype=torch.complex64),)),
    Case("istft_short_window_trimmed_length",
         Fn(lambda s: torch.istft(s, 16, hop_length=3, win_length=10, window=torch.hann_window(10), length=30)),
         (torch.randn(9, 12, dtype=torch.complex64),)),
    Case("istft_twosided_complex_no_window",
         Fn(lambda s: torch.view_as_real(torch.istft(s, 12, onesided=False, return_complex=True, length=40))),
         (torch.randn(12, 14, dtype=torch.complex64),)),
    Case("istft_to_the_input_length", Fn(lambda a: torch.istft(  # pnnx leaves it aten::istft
        torch.stft(a, 32, 8, window=torch.hann_window(32), return_complex=True) * 0.5, 32, 8,
        window=torch.hann_window(32), length=a.shape[-1])), (x(1, 150),)),
    # the same, exported with the length dynamic: the output's length is the input's
    Case("istft_to_the_dynamic_input_length", Fn(lambda a: torch.istft(
        torch.stft(a, 32, 8, window=torch.hann_window(32), return_complex=True) * 0.5, 32, 8,
        window=torch.hann_window(32), length=a.shape[-1])), (x(2, 100),), inputs2=(x(3, 141),),
        more_inputs=((x(1, 77),), (x(2, 200),))),
    Case("istft_of_stft", Fn(lambda a: torch.istft(
        torch.stft(a, 32, 8, window=torch.hann_window(32), return_complex=True), 32, 8,
        window=torch.hann_window(32), length=150)), (x(2, 150),)),
    # tanh and sigmoid of a spectrum (FEDformer's frequency attention): complex in, complex out
    Case("tanh_and_sigmoid_of_spectra", Fn(lambda a: torch.view_as_real(
        torch.tanh(torch.fft.rfft(a, dim=-1)) + torch.sigmoid(torch.fft.rfft(a, dim=-1) * 0.5))),
        (x(1, 2, 3, 8),)),
]
