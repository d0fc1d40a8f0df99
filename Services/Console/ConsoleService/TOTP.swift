import Crypto
import Foundation

/// Time-based one-time passwords (RFC 6238 over RFC 4226's HOTP): HMAC-SHA1, 30-second steps, 6 digits, what every
/// authenticator app reads from a base32 setup key.
public struct TOTP: Sendable, Equatable {
    public let secret: [UInt8]
    public static let stepSeconds: Int64 = 30
    public static let digits = 6

    public init(secret: [UInt8]) { self.secret = secret }

    /// A new random 20-byte secret (RFC 4226's recommended length).
    public static func random() -> TOTP {
        var rng = SystemRandomNumberGenerator()
        return TOTP(secret: (0..<20).map { _ in rng.next() })
    }

    /// The time step of a Unix time in milliseconds.
    public static func step(atMs ms: Int64) -> Int64 { ms / 1000 / stepSeconds }

    /// The code of a time step, zero-padded.
    public func code(step: Int64) -> String {
        var counter = UInt64(bitPattern: step).bigEndian
        let message = withUnsafeBytes(of: &counter) { Array($0) }
        let mac = Array(HMAC<Insecure.SHA1>.authenticationCode(for: message, using: SymmetricKey(data: secret)))
        let offset = Int(mac[mac.count - 1] & 0x0f)
        let binary =
            (UInt32(mac[offset] & 0x7f) << 24) | (UInt32(mac[offset + 1]) << 16) | (UInt32(mac[offset + 2]) << 8) | UInt32(mac[offset + 3])
        let value = binary % 1_000_000
        let text = String(value)
        return String(repeating: "0", count: Self.digits - text.count) + text
    }

    /// The step `code` belongs to within one step either side of `nowMs` (clock drift), if any; later steps first so a
    /// replay check against the last accepted step is exact.
    public func matchingStep(_ code: String, nowMs: Int64) -> Int64? {
        let trimmed = code.filter { !$0.isWhitespace }
        guard trimmed.count == Self.digits, trimmed.allSatisfy(\.isASCII), trimmed.allSatisfy(\.isNumber) else { return nil }
        let now = Self.step(atMs: nowMs)
        for step in [now + 1, now, now - 1] where constantTimeEqual(self.code(step: step), trimmed) { return step }
        return nil
    }

    private func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let (x, y) = (Array(a.utf8), Array(b.utf8))
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

/// RFC 4648 base32 (upper case, no padding on output; padding and spaces ignored on input), the form of TOTP setup keys.
public enum Base32 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = (buffer << 8) | UInt32(byte)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[Int((buffer >> UInt32(bits - 5)) & 31)])
                bits -= 5
            }
        }
        if bits > 0 { out.append(alphabet[Int((buffer << UInt32(5 - bits)) & 31)]) }
        return String(decoding: out, as: UTF8.self)
    }

    public static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for c in text.uppercased().utf8 where c != UInt8(ascii: "=") && c != UInt8(ascii: " ") {
            guard let value = alphabet.firstIndex(of: c) else { return nil }
            buffer = (buffer << 5) | UInt32(value)
            bits += 5
            if bits >= 8 {
                out.append(UInt8((buffer >> UInt32(bits - 8)) & 0xff))
                bits -= 8
            }
        }
        return out
    }
}
