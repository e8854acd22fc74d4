// weft web UI entry module (placeholder until the views land).
document.getElementById("main").textContent = "weft";
