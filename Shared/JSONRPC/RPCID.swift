/// A JSON-RPC request id, kept as the exact JSON text the client sent so it is echoed byte for byte.
///
/// Only strings, integers (no fraction, no exponent) and null are accepted: the spec discourages
/// fractional ids, and a rewritten id (`1e0` -> `1`) would break a client's correlation.
public struct RPCID: Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable { case string, integer, null }
    public let kind: Kind
    /// The id exactly as it appears on the wire (strings include their quotes).
    public let rawJSON: [UInt8]

    public static let null = RPCID(kind: .null, rawJSON: Array("null".utf8))

    public init(kind: Kind, rawJSON: [UInt8]) {
        self.kind = kind
        self.rawJSON = rawJSON
    }

    public init(_ value: Int64) {
        self.init(kind: .integer, rawJSON: Array(String(value).utf8))
    }

    public init(_ value: String) {
        self.init(kind: .string, rawJSON: JSONWriter.quoted(value))
    }

    /// The id as an integer, when it is one that fits in Int64 (the client side correlates by this).
    public var integerValue: Int64? {
        kind == .integer ? Int64(String(decoding: rawJSON, as: UTF8.self)) : nil
    }

    public var description: String { String(decoding: rawJSON, as: UTF8.self) }
}
