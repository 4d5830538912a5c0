//! RemotingCommand: the one message type of the protocol (spec §3).
//!
//! Owns: the fields, flag-bit meaning, opaque allocation and the choice of header
//! serialization when encoding. Must not: know about sockets.

use std::sync::atomic::{AtomicI32, Ordering};

use bytes::{Bytes, BytesMut};

use crate::code::{version, LanguageCode, RequestCode, ResponseCode};
use crate::custom_headers::CommandHeader;
use crate::error::{FrameError, HeaderError};
use crate::frame::{self, RawFrame, SerializeType};
use crate::header_encoding::{binary, json};

pub use crate::ext_fields::ExtFields;

/// Flag bit 0: this frame is a response.
pub const FLAG_RESPONSE: i32 = 0x1;
/// Flag bit 1: request for which no response is expected.
pub const FLAG_ONEWAY: i32 = 0x2;
/// Version ordinal written by this implementation (V4_9_4: every client version knows it,
/// and name servers answer it with standard JSON).
pub const DEFAULT_VERSION: i32 = version::V4_9_4;

static NEXT_OPAQUE: AtomicI32 = AtomicI32::new(0);

/// Next process-wide request id (Java: a counter starting at 0).
pub fn next_opaque() -> i32 {
    NEXT_OPAQUE.fetch_add(1, Ordering::Relaxed)
}

/// A request or response. Construct with [`RemotingCommand::request`] /
/// [`RemotingCommand::response`], refine with the `with_*` builders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotingCommand {
    code: i32,
    language: LanguageCode,
    version: i32,
    opaque: i32,
    flag: i32,
    remark: Option<String>,
    ext_fields: ExtFields,
    body: Bytes,
    serialize_type: SerializeType,
}

impl Default for RemotingCommand {
    fn default() -> Self {
        RemotingCommand {
            code: 0,
            language: LanguageCode::JAVA,
            version: DEFAULT_VERSION,
            opaque: 0,
            flag: 0,
            remark: None,
            ext_fields: ExtFields::new(),
            body: Bytes::new(),
            serialize_type: SerializeType::Json,
        }
    }
}

impl RemotingCommand {
    /// A request with a fresh opaque and the typed header flattened into extFields.
    pub fn request<H: CommandHeader + ?Sized>(code: RequestCode, header: &H) -> RemotingCommand {
        let mut cmd = RemotingCommand {
            code: code.0,
            opaque: next_opaque(),
            ..RemotingCommand::default()
        };
        header.write_to(&mut cmd.ext_fields);
        cmd
    }

    /// A request without custom header.
    pub fn request_empty(code: RequestCode) -> RemotingCommand {
        RemotingCommand {
            code: code.0,
            opaque: next_opaque(),
            ..RemotingCommand::default()
        }
    }

    /// A response with a remark (`""` means none). The server fills in the opaque and the
    /// serialization of the request it answers ([`RemotingCommand::mark_response_to`]).
    pub fn response(code: ResponseCode, remark: impl Into<String>) -> RemotingCommand {
        let remark = remark.into();
        RemotingCommand {
            code: code.0,
            flag: FLAG_RESPONSE,
            remark: if remark.is_empty() {
                None
            } else {
                Some(remark)
            },
            ..RemotingCommand::default()
        }
    }

    /// `SUCCESS` response without remark.
    pub fn success() -> RemotingCommand {
        RemotingCommand::response(ResponseCode::SUCCESS, "")
    }

    /// A response already bound to `request` (opaque, serialization).
    pub fn response_to(
        request: &RemotingCommand,
        code: ResponseCode,
        remark: impl Into<String>,
    ) -> RemotingCommand {
        let mut r = RemotingCommand::response(code, remark);
        r.mark_response_to(request);
        r
    }

    /// Java's answer to a request code without processor (note the leading space).
    pub fn request_code_not_supported(request: &RemotingCommand) -> RemotingCommand {
        RemotingCommand::response_to(
            request,
            ResponseCode::REQUEST_CODE_NOT_SUPPORTED,
            format!(" request type {} not supported", request.code),
        )
    }

    /// Makes this command the response to `request`: copies the opaque, sets the response bit
    /// and uses the request's serialization (spec §4.4: C++ clients need JSON for JSON).
    pub fn mark_response_to(&mut self, request: &RemotingCommand) {
        self.opaque = request.opaque;
        self.flag |= FLAG_RESPONSE;
        self.serialize_type = request.serialize_type;
    }

    // ---- builders ----

    /// Sets the body.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets the remark (`""` means none).
    pub fn with_remark(mut self, remark: impl Into<String>) -> Self {
        self.set_remark(remark);
        self
    }

    /// Adds one extFields entry.
    pub fn with_ext_field(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.ext_fields.set(&key.into(), &value.into());
        self
    }

    /// Flattens a typed header into extFields (adds to existing entries).
    pub fn with_header<H: CommandHeader + ?Sized>(mut self, header: &H) -> Self {
        header.write_to(&mut self.ext_fields);
        self
    }

    /// Marks a request oneway.
    pub fn with_oneway(mut self) -> Self {
        self.flag |= FLAG_ONEWAY;
        self
    }

    /// Chooses the header serialization used when this command is encoded.
    pub fn with_serialize_type(mut self, t: SerializeType) -> Self {
        self.serialize_type = t;
        self
    }

    /// Sets the version ordinal.
    pub fn with_version(mut self, version: i32) -> Self {
        self.version = version;
        self
    }

    /// Sets the language.
    pub fn with_language(mut self, language: LanguageCode) -> Self {
        self.language = language;
        self
    }

    /// Sets the opaque.
    pub fn with_opaque(mut self, opaque: i32) -> Self {
        self.opaque = opaque;
        self
    }

    /// Sets the raw flag word.
    pub fn with_flag(mut self, flag: i32) -> Self {
        self.flag = flag;
        self
    }

    // ---- accessors ----

    /// Raw code (request or response code depending on the flag).
    pub fn code(&self) -> i32 {
        self.code
    }
    /// The code read as a request code.
    pub fn request_code(&self) -> RequestCode {
        RequestCode(self.code)
    }
    /// The code read as a response code.
    pub fn response_code(&self) -> ResponseCode {
        ResponseCode(self.code)
    }
    /// Sender's language.
    pub fn language(&self) -> LanguageCode {
        self.language
    }
    /// Sender's version ordinal.
    pub fn version(&self) -> i32 {
        self.version
    }
    /// Request id.
    pub fn opaque(&self) -> i32 {
        self.opaque
    }
    /// Raw flag word (other bits are preserved).
    pub fn flag(&self) -> i32 {
        self.flag
    }
    /// Response bit set.
    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }
    /// Oneway bit set.
    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }
    /// Free text, mainly error messages.
    pub fn remark(&self) -> Option<&str> {
        self.remark.as_deref()
    }
    /// The custom header map.
    pub fn ext_fields(&self) -> &ExtFields {
        &self.ext_fields
    }
    /// Mutable custom header map.
    pub fn ext_fields_mut(&mut self) -> &mut ExtFields {
        &mut self.ext_fields
    }
    /// One extFields value.
    pub fn ext_field(&self, key: &str) -> Option<&str> {
        self.ext_fields.get(key)
    }
    /// The body (cheap to clone).
    pub fn body(&self) -> &Bytes {
        &self.body
    }
    /// Takes the body out, leaving it empty.
    pub fn take_body(&mut self) -> Bytes {
        std::mem::take(&mut self.body)
    }
    /// Header serialization of this command (as received, or as it will be sent).
    pub fn serialize_type(&self) -> SerializeType {
        self.serialize_type
    }

    /// Decodes the typed custom header from extFields.
    pub fn decode_header<H: CommandHeader>(&self) -> Result<H, HeaderError> {
        H::read_from(&self.ext_fields)
    }

    // ---- setters ----

    /// Sets the raw code.
    pub fn set_code(&mut self, code: i32) {
        self.code = code;
    }
    /// Sets the opaque.
    pub fn set_opaque(&mut self, opaque: i32) {
        self.opaque = opaque;
    }
    /// Sets the raw flag word.
    pub fn set_flag(&mut self, flag: i32) {
        self.flag = flag;
    }
    /// Sets the remark (`""` means none).
    pub fn set_remark(&mut self, remark: impl Into<String>) {
        let remark = remark.into();
        self.remark = if remark.is_empty() {
            None
        } else {
            Some(remark)
        };
    }
    /// Sets the body.
    pub fn set_body(&mut self, body: impl Into<Bytes>) {
        self.body = body.into();
    }
    /// Sets the header serialization.
    pub fn set_serialize_type(&mut self, t: SerializeType) {
        self.serialize_type = t;
    }
    /// Sets the version ordinal.
    pub fn set_version(&mut self, version: i32) {
        self.version = version;
    }
    /// Sets the language.
    pub fn set_language(&mut self, language: LanguageCode) {
        self.language = language;
    }

    // ---- wire ----

    /// Serialization actually used on the wire: ROCKETMQ headers hold 16-bit code and
    /// version, so commands that do not fit fall back to JSON (spec Q11).
    pub fn wire_serialize_type(&self) -> SerializeType {
        match self.serialize_type {
            SerializeType::RocketMq
                if i16::try_from(self.code).is_err() || i16::try_from(self.version).is_err() =>
            {
                SerializeType::Json
            }
            t => t,
        }
    }

    /// Appends this command as one frame to `dst`.
    pub fn encode(&self, dst: &mut BytesMut, max_frame_len: usize) -> Result<(), FrameError> {
        let t = self.wire_serialize_type();
        dst.reserve(8 + 192 + 24 * self.ext_fields.len() + self.body.len());
        frame::encode_frame_with(
            dst,
            t,
            max_frame_len,
            |d| match t {
                SerializeType::Json => json::encode(self, d),
                SerializeType::RocketMq => binary::encode(self, d),
            },
            &self.body,
        )
    }

    /// Encodes into a fresh buffer with the default frame limit.
    pub fn encode_to_bytes(&self) -> Result<Bytes, FrameError> {
        let mut b = BytesMut::new();
        self.encode(&mut b, frame::DEFAULT_MAX_FRAME_LEN)?;
        Ok(b.freeze())
    }

    /// Builds a command from a split frame.
    pub fn from_frame(frame: RawFrame) -> Result<RemotingCommand, FrameError> {
        let mut cmd = match frame.serialize_type {
            SerializeType::Json => json::decode(&frame.header)?,
            SerializeType::RocketMq => binary::decode(&frame.header)?,
        };
        cmd.serialize_type = frame.serialize_type;
        cmd.body = frame.body;
        Ok(cmd)
    }

    /// Decodes exactly one complete frame (length field included) from `bytes`.
    pub fn decode_frame_bytes(bytes: &[u8]) -> Result<Option<RemotingCommand>, FrameError> {
        let mut b = BytesMut::from(bytes);
        match frame::decode_frame(&mut b, frame::DEFAULT_MAX_FRAME_LEN)? {
            Some(f) => Ok(Some(RemotingCommand::from_frame(f)?)),
            None => Ok(None),
        }
    }

    /// Internal constructor used by the header decoders.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        code: i32,
        language: LanguageCode,
        version: i32,
        opaque: i32,
        flag: i32,
        remark: Option<String>,
        ext_fields: ExtFields,
    ) -> RemotingCommand {
        RemotingCommand {
            code,
            language,
            version,
            opaque,
            flag,
            remark: remark.filter(|r| !r.is_empty()),
            ext_fields,
            body: Bytes::new(),
            serialize_type: SerializeType::Json,
        }
    }
}
