//! Opening a pinned map by name: once ([`open`]), or twice as a [`Shared`] write/read pair.
//!
//! This is a leaf: it imports only the pin layout and the error, so every file that opens a map
//! (the map files here and [`crate::kernel::lockout_cache`]) can use it without importing each
//! other.

use aya::maps::{Map, MapData};
use parking_lot::Mutex;

use crate::kernel::pins::PinLayout;
use crate::kernel::KernelError;

fn open_raw(layout: &PinLayout, name: &'static str) -> Result<Map, KernelError> {
    let path = layout.map(name);
    let wrap = |source| KernelError::OpenMap {
        name,
        path: path.clone(),
        source: Box::new(source),
    };
    let data = MapData::from_pin(&path).map_err(wrap)?;
    Map::from_map_data(data).map_err(wrap)
}

/// Opens the map pinned as `name` as the typed map `T`; errors name the map and its pin.
pub(in crate::kernel) fn open<T>(layout: &PinLayout, name: &'static str) -> Result<T, KernelError>
where
    T: TryFrom<Map, Error = aya::maps::MapError>,
{
    let map = open_raw(layout, name)?;
    T::try_from(map).map_err(|source| KernelError::OpenMap {
        name,
        path: layout.map(name),
        source: Box::new(source),
    })
}

/// One map opened twice: writes go through a mutex (aya's updates take `&mut`), reads and scans
/// use the second handle without a lock, so a long scan (status, sweep) never holds up a lockout
/// being written from the request path.
pub(super) struct Shared<M> {
    write: Mutex<M>,
    read: M,
}

impl<M: TryFrom<Map, Error = aya::maps::MapError>> Shared<M> {
    pub(super) fn open(layout: &PinLayout, name: &'static str) -> Result<Self, KernelError> {
        Ok(Self {
            write: Mutex::new(open(layout, name)?),
            read: open(layout, name)?,
        })
    }
}

impl<M> Shared<M> {
    pub(super) fn read(&self) -> &M {
        &self.read
    }
    pub(super) fn write(&self) -> parking_lot::MutexGuard<'_, M> {
        self.write.lock()
    }
}
