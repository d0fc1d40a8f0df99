import Foundation

/// Hand-written JSON output for the envelope (so `id` and exactly one of `result`/`error` are always
/// present, which Codable's defaults do not guarantee), and the shared Codable settings for bodies.
public enum JSONWriter {
    /// A JSON string literal for `value`, quotes included.
    public static func quoted(_ value: String) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "\"")]
        out.reserveCapacity(value.utf8.count + 2)
        for b in value.utf8 {
            switch b {
            case UInt8(ascii: "\""): out += [0x5C, 0x22]
            case UInt8(ascii: "\\"): out += [0x5C, 0x5C]
            case 0x0A: out += [0x5C, UInt8(ascii: "n")]
            case 0x0D: out += [0x5C, UInt8(ascii: "r")]
            case 0x09: out += [0x5C, UInt8(ascii: "t")]
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out += [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 0xF)]]
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
        return out
    }

    public static let successPrefix = Array(#"{"jsonrpc":"2.0","id":"#.utf8)
    public static let resultKey = Array(#","result":"#.utf8)
    /// Closes a success envelope and ends the line.
    public static let lineEnd = Array("}\n".utf8)
    static let errorKey = Array(#","error":"#.utf8)

    /// `{"jsonrpc":"2.0","id":ID,"result":RESULT}` without the trailing newline.
    public static func success(id: RPCID, result: some Collection<UInt8>, into out: inout [UInt8]) {
        out.reserveCapacity(out.count + successPrefix.count + id.rawJSON.count + resultKey.count + result.count + 1)
        out += successPrefix
        out += id.rawJSON
        out += resultKey
        out += result
        out.append(UInt8(ascii: "}"))
    }

    /// `{"jsonrpc":"2.0","id":ID,"error":{...}}` without the trailing newline.
    public static func failure(id: RPCID, error: RPCError, into out: inout [UInt8]) {
        out += successPrefix
        out += id.rawJSON
        out += errorKey
        out += encodeBody(error) ?? Array(#"{"code":-32603,"message":"Internal error","data":{"reason":"internal","retryable":true}}"#.utf8)
        out.append(UInt8(ascii: "}"))
    }

    /// A request line for clients: `{"jsonrpc":"2.0","id":ID,"method":M,"params":P}` (no id: a notification).
    public static func request(id: RPCID?, method: String, params: some Collection<UInt8>, into out: inout [UInt8]) {
        out += Array(#"{"jsonrpc":"2.0","#.utf8)
        if let id {
            out += Array(#""id":"#.utf8)
            out += id.rawJSON
            out.append(UInt8(ascii: ","))
        }
        out += Array(#""method":"#.utf8)
        out += quoted(method)
        out += Array(#","params":"#.utf8)
        out += params
        out.append(UInt8(ascii: "}"))
    }

    /// Encodes a body with the wire settings (compact: a newline would end the message).
    public static func encodeBody<T: Encodable>(_ value: T) -> [UInt8]? {
        try? JSONByteEncoder.encode(value)
    }

    /// Like `encodeBody`, but reports the failure (a result that cannot be encoded is a server bug).
    public static func encodeBodyOrThrow<T: Encodable>(_ value: T) throws(RPCError) -> [UInt8] {
        do {
            return try JSONByteEncoder.encode(value)
        } catch {
            throw RPCError.internalError("result could not be encoded: \(error)")
        }
    }
}
