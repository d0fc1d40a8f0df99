import Foundation
import JSONRPC

/// Usernames are compared case-insensitively after Unicode NFKC normalization, so `Alice`, `alice`
/// and `Ａｌｉｃｅ` (full-width) are one account.
public enum UsernamePolicy {
    public static let maxLength = 64

    /// The display form (NFKC) and the lookup key (NFKC, lowercased), or a typed error.
    public static func normalize(_ raw: String) throws(RPCError) -> (display: String, key: String) {
        let display = raw.precomposedStringWithCompatibilityMapping
        guard !display.isEmpty else {
            throw RPCError.invalidParams("username must not be empty", field: "username", reason: "invalidUsername")
        }
        guard display.count <= maxLength else {
            throw RPCError.invalidParams("username is longer than \(maxLength) characters", field: "username", reason: "tooLong")
        }
        guard
            !display.unicodeScalars.contains(where: {
                $0.properties.isWhitespace || $0.properties.generalCategory == .control
                    || $0.properties.generalCategory == .format
            })
        else {
            throw RPCError.invalidParams(
                "username must not contain spaces or control characters", field: "username",
                reason: "invalidUsername")
        }
        let key = display.lowercased().precomposedStringWithCompatibilityMapping
        return (display, key)
    }
}

/// Minimum strength for new passwords (NIST SP 800-63B: length, and not a known-common password).
public enum PasswordPolicy {
    public static let minLength = 8
    /// Bounds the work a single request can ask of the KDF.
    public static let maxBytes = 1024

    private static let common: Set<String> = [
        "password", "password1", "password123", "12345678", "123456789", "1234567890", "qwertyuiop", "qwerty123",
        "iloveyou", "11111111", "00000000", "abc12345", "letmein1", "welcome1", "admin123", "passw0rd", "sunshine",
        "princess", "football", "baseball", "starwars", "trustno1", "superman", "12341234", "87654321",
    ]

    public static func check(_ password: String, username: String, field: String = "password") throws(RPCError) {
        if password.utf8.count > maxBytes {
            throw RPCError.invalidParams("password is longer than \(maxBytes) bytes", field: field, reason: "tooLong")
        }
        if password.count < minLength {
            throw RPCError.invalidParams("password must have at least \(minLength) characters", field: field, reason: "weakPassword")
        }
        let lowered = password.lowercased()
        if common.contains(lowered) || Set(password).count == 1 || lowered == username.lowercased() {
            throw RPCError.invalidParams("password is too easy to guess", field: field, reason: "weakPassword")
        }
    }
}

/// Bounds for free-text inputs stored with a session.
public enum DeviceNamePolicy {
    public static let maxLength = 100

    public static func check(_ name: String?) throws(RPCError) {
        guard let name else { return }
        if name.count > maxLength {
            throw RPCError.invalidParams("deviceName is longer than \(maxLength) characters", field: "deviceName", reason: "tooLong")
        }
    }
}
