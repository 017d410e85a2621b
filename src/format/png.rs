//! PNG: one level of a multiscale image as a picture any viewer opens. The level's values
//! (C order, in the array's own axis order) are rearranged to rows of pixels; 1 to 4 channels
//! are gray, gray + alpha, RGB and RGBA. 8- and 16-bit unsigned values are kept as they are;
//! any other type is scaled from its finite minimum and maximum to 8 bits.
//!
//! The pixels are stored, not compressed (zlib's stored blocks), so the file's size follows
//! from the level's shape alone and `stat` tells it without reading any data.

use std::io;

use arrow_schema::DataType;

/// What an array dimension of an image holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageAxis {
    X,
    Y,
    Channel,
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// Values as numbers, whatever their type (for scaling).
fn as_f64(values: &[u8], t: &DataType) -> io::Result<Vec<f64>> {
    macro_rules! each {
        ($t:ty) => {
            values
                .chunks_exact(std::mem::size_of::<$t>())
                .map(|c| <$t>::from_le_bytes(c.try_into().expect("exact chunk")) as f64)
                .collect()
        };
    }
    Ok(match t {
        DataType::Int8 => each!(i8),
        DataType::Int16 => each!(i16),
        DataType::Int32 => each!(i32),
        DataType::Int64 => each!(i64),
        DataType::UInt32 => each!(u32),
        DataType::UInt64 => each!(u64),
        DataType::Float32 => each!(f32),
        DataType::Float64 => each!(f64),
        other => return Err(invalid(format!("cannot draw values of type {other}"))),
    })
}

/// The PNG layout of a level: width, height, channels and bytes per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PngLayout {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
    pub sample_bytes: usize,
}

/// The most data one stored deflate block holds.
const STORED_BLOCK: usize = 65_535;

impl PngLayout {
    /// The layout of a level of `shape` with these axes and value type.
    pub fn new(shape: &[u64], t: &DataType, axes: &[ImageAxis]) -> io::Result<PngLayout> {
        if shape.len() != axes.len() {
            return Err(invalid("the image's axes do not match its shape"));
        }
        let find = |axis| axes.iter().position(|a| *a == axis);
        let (x, y) = match (find(ImageAxis::X), find(ImageAxis::Y)) {
            (Some(x), Some(y)) => (x, y),
            _ => return Err(invalid("an image needs an x and a y axis")),
        };
        let channels = find(ImageAxis::Channel).map_or(1, |c| shape[c] as usize);
        if !(1..=4).contains(&channels) {
            return Err(invalid(format!(
                "cannot draw an image of {channels} channels"
            )));
        }
        Ok(PngLayout {
            width: shape[x] as usize,
            height: shape[y] as usize,
            channels,
            sample_bytes: if *t == DataType::UInt16 { 2 } else { 1 },
        })
    }

    /// Bytes of the rows as PNG filters them (a filter byte before each row).
    fn raw_len(&self) -> usize {
        self.height * (1 + self.width * self.channels * self.sample_bytes)
    }

    /// The whole file's size.
    pub fn file_size(&self) -> u64 {
        let raw = self.raw_len();
        let blocks = raw.div_ceil(STORED_BLOCK).max(1);
        let zlib = 2 + raw + 5 * blocks + 4;
        (8 + (12 + 13) + (12 + zlib) + 12) as u64
    }
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// Encodes `values` (C order over `shape`, one axis per dimension) as a PNG.
pub fn encode(
    values: &[u8],
    shape: &[u64],
    t: &DataType,
    axes: &[ImageAxis],
) -> io::Result<Vec<u8>> {
    let layout = PngLayout::new(shape, t, axes)?;
    let samples = samples(values, t)?;
    let expected: usize = shape.iter().map(|&d| d as usize).product();
    if samples.len() != expected {
        return Err(invalid(format!(
            "the image holds {} values for a shape of {expected}",
            samples.len()
        )));
    }
    let raw = pixel_rows(&layout, &samples, shape, axes);
    let mut out = Vec::with_capacity(layout.file_size() as usize);
    out.extend_from_slice(b"\x89PNG\r\n\x1a\n");
    chunk(&mut out, b"IHDR", &header(&layout));
    chunk(&mut out, b"IDAT", &stored_zlib(&raw));
    chunk(&mut out, b"IEND", &[]);
    debug_assert_eq!(out.len() as u64, layout.file_size());
    Ok(out)
}

/// `values` of type `t` as samples, in the array's order: 8- and 16-bit unsigned values as
/// they are, any other type scaled from its finite minimum and maximum to 0..=255 (values
/// that are not finite are 0).
fn samples(values: &[u8], t: &DataType) -> io::Result<Vec<u16>> {
    Ok(match t {
        DataType::UInt8 => values.iter().map(|&v| u16::from(v)).collect(),
        DataType::UInt16 => values
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect(),
        other => {
            let numbers = as_f64(values, other)?;
            let finite = numbers.iter().copied().filter(|v| v.is_finite());
            let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
            let span = if hi > lo { hi - lo } else { 1.0 };
            numbers
                .iter()
                .map(|v| {
                    if v.is_finite() {
                        ((v - lo) / span * 255.0).round() as u16
                    } else {
                        0
                    }
                })
                .collect()
        }
    })
}

/// The rows of pixels as PNG filters them: each row a filter byte (none), then its pixels
/// left to right, each its channels' samples (big-endian when 16-bit), taken from `samples`
/// in the C order of `shape` with its `axes`.
fn pixel_rows(layout: &PngLayout, samples: &[u16], shape: &[u64], axes: &[ImageAxis]) -> Vec<u8> {
    let find = |axis| axes.iter().position(|a| *a == axis);
    let (x, y, channel) = (
        find(ImageAxis::X).expect("checked by the layout"),
        find(ImageAxis::Y).expect("checked by the layout"),
        find(ImageAxis::Channel),
    );
    // Strides of the array's C order.
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1] as usize;
    }
    let mut raw = Vec::with_capacity(layout.raw_len());
    for row in 0..layout.height {
        raw.push(0); // filter: none
        for col in 0..layout.width {
            for c in 0..layout.channels {
                let at =
                    row * strides[y] + col * strides[x] + channel.map_or(0, |ch| c * strides[ch]);
                let sample = samples[at];
                if layout.sample_bytes == 2 {
                    raw.extend_from_slice(&sample.to_be_bytes());
                } else {
                    raw.push(sample as u8);
                }
            }
        }
    }
    raw
}

/// `raw` as a zlib stream of stored (uncompressed) deflate blocks of at most
/// [`STORED_BLOCK`] bytes (one empty block when `raw` is empty), and its Adler-32.
fn stored_zlib(raw: &[u8]) -> Vec<u8> {
    let mut zlib = Vec::with_capacity(raw.len() + raw.len() / STORED_BLOCK * 5 + 16);
    zlib.extend_from_slice(&[0x78, 0x01]);
    let blocks: Vec<&[u8]> = if raw.is_empty() {
        vec![&[][..]]
    } else {
        raw.chunks(STORED_BLOCK).collect()
    };
    for (i, block) in blocks.iter().enumerate() {
        zlib.push(u8::from(i + 1 == blocks.len()));
        let len = block.len() as u16;
        zlib.extend_from_slice(&len.to_le_bytes());
        zlib.extend_from_slice(&(!len).to_le_bytes());
        zlib.extend_from_slice(block);
    }
    let mut adler = adler2::Adler32::new();
    adler.write_slice(raw);
    zlib.extend_from_slice(&adler.checksum().to_be_bytes());
    zlib
}

/// The IHDR chunk's data: width, height, bit depth, color type (gray, gray + alpha, RGB or
/// RGBA by the channels), and deflate, adaptive filtering and no interlace.
fn header(layout: &PngLayout) -> Vec<u8> {
    let color: u8 = match layout.channels {
        1 => 0,
        2 => 4,
        3 => 2,
        _ => 6,
    };
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&(layout.width as u32).to_be_bytes());
    ihdr.extend_from_slice(&(layout.height as u32).to_be_bytes());
    ihdr.extend_from_slice(&[(layout.sample_bytes * 8) as u8, color, 0, 0, 0]);
    ihdr
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_first_rgb_becomes_rows_of_pixels() {
        // shape (C=3, Y=1, X=2): red = [1, 2], green = [3, 4], blue = [5, 6]
        let values = [1u8, 2, 3, 4, 5, 6];
        let png = encode(
            &values,
            &[3, 1, 2],
            &DataType::UInt8,
            &[ImageAxis::Channel, ImageAxis::Y, ImageAxis::X],
        )
        .unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (2, 1));
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert_eq!(&buf[..info.buffer_size()], &[1, 3, 5, 2, 4, 6]);
    }

    #[test]
    fn size_follows_from_the_shape_for_big_and_16_bit_images() {
        let shape = [300u64, 400];
        let values: Vec<u8> = (0..shape[0] * shape[1] * 2).map(|i| i as u8).collect();
        let axes = [ImageAxis::Y, ImageAxis::X];
        let png = encode(&values, &shape, &DataType::UInt16, &axes).unwrap();
        let layout = PngLayout::new(&shape, &DataType::UInt16, &axes).unwrap();
        assert_eq!(png.len() as u64, layout.file_size());
        let mut reader = png::Decoder::new(std::io::Cursor::new(png))
            .read_info()
            .unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (400, 300));
        assert_eq!(&buf[..4], &[1, 0, 3, 2], "16-bit samples are big-endian");
    }
}
