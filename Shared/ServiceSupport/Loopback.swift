/// Whether a bind address is this machine only: `localhost`, `::1`, or an IPv4 address in 127.0.0.0/8 written as four
/// numbers (not a host name that merely starts with "127."). Plain HTTP is allowed there only.
public enum Loopback {
    public static func contains(_ host: String) -> Bool {
        if ["localhost", "::1"].contains(host) { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { p in p.count <= 3 && UInt8(p) != nil }
    }
}
